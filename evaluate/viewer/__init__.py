"""`cader view`: a run's trajectories as one self-contained HTML page (no server, no CDN), tested in headless
Chromium. `build.write_viewer` is the entry point; `collect` digests records into cards, `page` writes the HTML,
`thumbs` decodes a few frames per sample, viewer.js/viewer.css are inlined into the page."""
