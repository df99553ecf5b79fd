"""What the test suite (and the benchmarks) share that users do not need: the API axis
(every behaviour test on the sync API and on the async one), scratch PostgreSQL schemas,
and timing helpers. Kept out of the wheel; ``chatkeep.testing`` ships the fakes users
test their apps with."""
