"""``numoracle report DIR``: the HTML and Markdown report of a campaign directory."""

from __future__ import annotations


from . import common



def add_arguments(p) -> None:
    p.add_argument("dir", help="a campaign directory (holding campaign.json) or the JSON file itself")
    p.add_argument("--out", default=None, help="where to write report.html and report.md (default: DIR)")
    common.add_json(p)


def run(args) -> int:
    from ..studies.campaign.report import headline, load, write
    h, m = write(args.dir, args.out)
    if args.json:
        common.emit_json(args, {"html": str(h), "markdown": str(m), "headline": headline(load(args.dir))})
    else:
        print(f"wrote {h} and {m}")
    return 0
