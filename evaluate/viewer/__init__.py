"""`cader view`: runs side by side and every sample's trajectory as one self-contained HTML page (no server, no
CDN), tested in headless Chromium. `build.write_viewer` is the entry point; `collect` digests records into cards,
`runs` summarises and compares the runs, `slices` breaks them down per benchmark, `encode` packs the cards into
columns and lazily parsed lines, `page` writes the HTML, `thumbs` decodes frames of the answer's and the verified
windows, viewer_*.js/viewer.css are inlined into the page; `browser` drives headless Chromium for the tests, the
B18 benchmark and the screenshots."""
