"""The inspector's views, one module per page family; each exports ``ROUTES``."""
