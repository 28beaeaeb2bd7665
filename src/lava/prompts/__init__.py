"""Prompt templates, kept as files so they read as prose and diff cleanly.

Rendered with StrictUndefined: a template that names a missing value fails loudly in tests
instead of silently prompting the model with an empty string.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATE_DIR = Path(__file__).parent


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
        auto_reload=False,  # templates ship with the package: no stat() per render on the hot path
    )


@cache
def template(name: str) -> jinja2.Template:
    # Held here: jinja's own lookup (a weak reference and a locked LRU per call) shows on the hot path.
    loaded = environment().get_template(name)
    # Jinja gives each template its globals as a ChainMap over the environment's, and every render
    # iterates it twice (to build the context and its key set), in Python: about a third of a short
    # template's render. Nothing adds globals after loading, so a plain dict of the same entries
    # renders the same text faster.
    loaded.globals = dict(loaded.globals)
    return loaded


def render(name: str, **values: Any) -> str:
    return template(name).render(**values).strip()


__all__ = ["render"]
