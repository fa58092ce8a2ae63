"""`gradetrail view`: a local, read-only web viewer over the run directories under a
results root (with `--labels`, also a place to label samples: the labels file is the one
thing it then writes).

Pages are rendered on the server (jinja2, autoescaped, the report's environment and
macros) and work without JavaScript; the viewer serves no script at all. Only `app`
imports Starlette and uvicorn, and only `gradetrail view` imports `app`, so the rest of
gradetrail never pays for them. The modules:

* `paths`: run directory names resolved inside the root (else NotFound, a 404);
* `catalog`: the runs under the root (manifests, read through `load_run`, cached by
  file signature) and the per-run sample indexes;
* `index`: a run's samples indexed once per (file, mtime, size) for filters, sort,
  search and paging; a page reads only its own lines, by byte offset, each validated
  by `trace.parse_record`;
* `svg`: the forest plot and the history plot, inline SVG drawn on the server (the
  HTML report draws the same forest plot);
* `pages`: every page as (status, HTML), without a web framework;
* `links`: the URL contract, and the link to a run's page for Dagster's metadata;
* `labelling`: `--labels`' rules: the queue's stratified order, the form's token and
  the own-origin check, a post's fields made a label (written through `labels`);
* `label_pages`: the labelling queue page and the post that writes a label;
* `app`: the Starlette routes, the security headers, and `serve` (loopback only).
"""
