// Colours the code blocks with the vendored highlight.js (no CDN at build or view time).
hljs.highlightAll();
