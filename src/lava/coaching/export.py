"""Dataset export for `magma-gen export <folder> --agent lava` (protocol.md §11).

GEN selects the well-scored completed candidates of its graphs and hands them to this exporter,
found through the `magma.export.gen` entry point `lava = "lava.coaching.export:exporter"`.
Every model call a candidate recorded in `internal_steps` becomes one chat row,

    {"messages": [{"role": "system", ...}, {"role": "user", ...}, ..., {"role": "assistant", ...}]}

the messages the model actually read (recovered from the faithful `full_prompt`) followed by what
it answered (`output_raw`), written to `datasets/lava_sft.json` (+ `_train`/`_validation`): the
OpenAI chat format that TRL, Axolotl, LLaMA-Factory and OpenAI fine-tuning read as is. Coached
turns (`origin: "coaching"`) pair the policy's prompt with the corrected answer. Calls whose answer
was unusable (`error` or `problems` recorded) are left out: a dataset must not teach them.

This module runs inside MAGMA's environment, so it imports only magma_core, pydantic and the
standard library from outside lava, and from lava nothing that needs the server's dependencies.
"""

from __future__ import annotations

import re
from typing import Any

from magma_core.protocol.agent_export import DatasetRenderer, ExportExample, ExportRecord, ExportResult, GenExporter

from .. import AGENT_ID, __version__

SFT_CHANNEL = "sft"
ROLES = ("system", "user", "assistant")

Messages = list[dict[str, str]]

# `GenerationRequest.prompt_text()`: "<|role|>\ncontent" blocks joined by blank lines (remote backends).
_LAVA_BLOCK = re.compile(r"(?:^|\n\n)<\|(system|user|assistant)\|>\n")
# A model's own chat template, as the embedded backend records it. ChatML (Qwen and most others):
_CHATML = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>\s*", re.DOTALL)
_CHATML_OPEN = "<|im_start|>assistant"
# ... and Llama 3's header format.
_LLAMA3 = re.compile(r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", re.DOTALL)
_LLAMA3_OPEN = "<|start_header_id|>assistant<|end_header_id|>"


def prompt_messages(full_prompt: str) -> Messages | None:
    """The chat messages behind a recorded prompt, or None when its layout is not one lava writes."""
    for split in (_split_lava, _split_chatml, _split_llama3):
        messages = split(full_prompt)
        if messages is not None:
            return messages if messages and all(m["role"] in ROLES for m in messages) else None
    return None


def _split_lava(text: str) -> Messages | None:
    parts = _LAVA_BLOCK.split(text)
    if len(parts) < 3 or parts[0] != "":
        return None
    return [{"role": role, "content": content} for role, content in zip(parts[1::2], parts[2::2], strict=True)]


def _split_template(text: str, block: re.Pattern[str], generation_prompt: str, prefix: str = "") -> Messages | None:
    """Messages of a rendered template, which may end with the open assistant turn the model continued."""
    body = text.removeprefix(prefix)
    messages: Messages = []
    position = 0
    for match in block.finditer(body):
        if body[position:match.start()].strip():
            return None  # text outside any message: not this template
        messages.append({"role": match[1], "content": match[2]})
        position = match.end()
    rest = body[position:]
    if not messages or rest.strip() not in ("", generation_prompt):
        return None
    return messages


def _split_chatml(text: str) -> Messages | None:
    return _split_template(text, _CHATML, _CHATML_OPEN)


def _split_llama3(text: str) -> Messages | None:
    return _split_template(text, _LLAMA3, _LLAMA3_OPEN, prefix="<|begin_of_text|>")


def training_rows(example: ExportExample) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(record id, row) for every usable recorded model call, and why the others were left out."""
    rows: list[tuple[str, dict[str, Any]]] = []
    left_out: list[str] = []
    for index, step in enumerate(example.candidate.internal_steps):
        name = f"{step.get('id', index)} ({step.get('component', 'unknown')})"
        prompt, answer = step.get("full_prompt"), step.get("output_raw")
        if not isinstance(prompt, str) or not prompt or not isinstance(answer, str) or not answer:
            left_out.append(f"{name}: no prompt and raw output recorded")
            continue
        if step.get("error") or step.get("problems"):
            left_out.append(f"{name}: its answer was not usable")
            continue
        messages = prompt_messages(prompt)
        if messages is None:
            left_out.append(f"{name}: the prompt's layout is not a known chat layout")
            continue
        row = {"prompt": messages, "completion": answer}
        rows.append((f"{example.example_id}:{index}:{step.get('id', index)}", row))
    return rows, left_out


class ChatRenderer(DatasetRenderer):
    """One channel, `sft`: OpenAI-style chat rows."""

    def __init__(self) -> None:
        self.filenames = {SFT_CHANNEL: "lava_sft.json"}

    def render(self, channel: str, example: dict[str, Any]) -> dict[str, Any]:
        if channel != SFT_CHANNEL:
            raise ValueError(f"unknown dataset channel {channel!r}; lava writes {', '.join(self.filenames)}")
        return {"messages": [*example["prompt"], {"role": "assistant", "content": example["completion"]}]}


class LavaExporter(GenExporter):
    agent_id = AGENT_ID
    agent_version = __version__

    def __init__(self) -> None:
        self.renderer = ChatRenderer()

    def export(self, examples: list[ExportExample], *, options: dict[str, Any] | None = None) -> list[ExportResult]:
        if options:
            raise ValueError(f"lava's exporter takes no options, got {sorted(options)}")
        results = []
        for example in examples:
            try:
                rows, left_out = training_rows(example)
                records = [ExportRecord(record_id=record_id, dataset=SFT_CHANNEL,
                                        data=self.renderer.render(SFT_CHANNEL, row)) for record_id, row in rows]
            except (TypeError, ValueError, KeyError) as error:  # a malformed record fails its example only
                results.append(ExportResult(example_id=example.example_id, status="error",
                                            reason=f"{type(error).__name__}: {error}"))
                continue
            if records:
                results.append(ExportResult(example_id=example.example_id, status="exported", records=records))
            else:
                reason = "; ".join(left_out) or "the candidate recorded no model call"
                results.append(ExportResult(example_id=example.example_id, status="skipped", reason=reason))
        return results


def exporter() -> LavaExporter:
    """The `magma.export.gen` entry point: a zero-argument factory, as GEN's loader calls it."""
    return LavaExporter()


__all__ = ["SFT_CHANNEL", "ChatRenderer", "LavaExporter", "exporter", "prompt_messages", "training_rows"]
