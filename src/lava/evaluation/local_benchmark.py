#!/usr/bin/env python3
"""Compile a small MAGMA-BENCH benchmark directory from installed magma_scenarios presets or definitions.

The published benchmark is only distributed through a model hub, which an
offline machine cannot reach, and the official compiler ("magma-bench-generator") is
not published.  This script uses the serialization helpers shipped inside the
magma_bench / magma_core wheels to write a directory that `magma-bench run
--benchmark-root DIR` accepts: one scenario, one skeleton, one semantic
variation (index 0, deterministic), one "clean" episode per preset or
definition argument.  OUT_DIR is deleted and rewritten.

Usage (inside the MAGMA venv):
    python magma_local_benchmark.py OUT_DIR press_button.ButtonPressOrdered [more presets of the same scenario]
    python magma_local_benchmark.py OUT_DIR press_button.Definition --max-tool-calls 6   # dynamic definition

Preset constructor keyword arguments can be given as JSON:
    python magma_local_benchmark.py OUT 'press_button.ButtonPressOrdered={"sequence_of_buttons":["sw1"],"instruction":"Press sw1"}'

An entry may end in @SEED to give that episode its own seed (definition expansion and semantic
randomization); otherwise entry i uses --seed + i.

MAGMA-BENCH gives every episode of a scenario directory the tools class and environment that
scenario.json names, but presets of one scenario may differ (color_sorting's CrossColorPreset
takes cubes by colour and source, its CleanTablePreset by name). Entries whose tools class or
environment differ from the first entry's are written to a sibling root, OUT_DIR.<ToolsClass>,
each complete and runnable on its own; every root written is printed as `root: PATH`.

Vendored from the MAGMA team's shared tools (shared/magma/magma_local_benchmark.py) so that
`lava eval` works from an installed lava; the @SEED suffix and the per-tools roots are lava's
additions.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path


def _dump(path: Path, model_or_obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if hasattr(model_or_obj, "model_dump_json"):
        text = model_or_obj.model_dump_json(indent=2)
    else:
        text = json.dumps(model_or_obj, indent=2)
    path.write_text(text + "\n", encoding="utf-8")


@dataclass
class Root:
    """One benchmark root: the episodes that share a tools class and an environment."""
    path: Path
    entries: list = field(default_factory=list)


def _write_index(root: Root, scenario_id: str, version: str) -> None:
    from magma_bench.artifacts import BenchmarkManifest

    _dump(root.path / "benchmark.json", BenchmarkManifest(
        schema_version="1.8",
        benchmark_version=version,
        generated_at=datetime.now(UTC).isoformat(),
        semantic_variations=1,
        scenarios=[scenario_id],
        total_episodes=len(root.entries),
        episodes=root.entries,
    ))
    # Schema 1.8 results fingerprint stats.json; magma_bench 2.0.1 only hashes it.
    _dump(root.path / "stats.json", {
        "total_episodes": len(root.entries),
        "scenarios": {scenario_id: len(root.entries)},
        "conditions": {"clean": len(root.entries)},
    })
    _dump(root.path / "manifest.json", {
        "schema_version": "1.0",
        "benchmark_version": version,
        "requirements": {
            package: metadata.version(package)
            for package in ("magma_bench", "magma_core", "magma_scenarios")
        },
    })


def _public_presentation(stage, translate):
    data = stage.model_dump(mode="python")
    presentation = data["presentation"]
    arguments = presentation["stage_input"]["instruction"].get("arguments") or {}
    if isinstance(arguments.get("content"), str):
        arguments["content"] = translate(arguments["content"])
    for key in ("verification_prompt", "stage_goal_description"):
        if isinstance(presentation.get(key), str):
            presentation[key] = translate(presentation[key])
    return type(stage).model_validate(data)


# One or two requests per episode; MAGMA-GEN's own TaskGenerator defaults to 40.
DEFAULT_MAX_TOOL_CALLS = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("presets", nargs="+", help="scenario.PresetOrDefinition[=JSON kwargs]")
    parser.add_argument("--version", default="0.0.1", help="benchmark_version to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tool-calls", type=int, default=DEFAULT_MAX_TOOL_CALLS,
                        help="target tool-call budget when expanding a task definition")
    args = parser.parse_args(argv)

    from magma_bench.artifacts import (
        CompiledEpisodeSpec,
        EpisodeIndexEntry,
        EpisodeMetadata,
        ScenarioManifest,
        SemanticManifest,
        SkeletonManifest,
        serialize_task_stages,
    )
    from magma_core.simulation.randomizer import RuntimeRandomizer
    from magma_core.simulation.randomizer.spec_generator import SpecGenerator
    from magma_core.simulation.serialization import encode_value
    from magma_scenarios.registry_loader import get_scenario, load_definition, load_preset

    out: Path = args.out.resolve()
    roots: dict[tuple[str, str], Root] = {}
    scenario_id = None
    for index, item in enumerate(args.presets):
        item, _, raw_seed = item.rpartition("@") if item.rsplit("@", 1)[-1].isdigit() else (item, "", "")
        entry_seed = int(raw_seed) if raw_seed else args.seed + index
        name, _, raw_kwargs = item.partition("=")
        kwargs = json.loads(raw_kwargs) if raw_kwargs else {}
        this_scenario, _, preset_name = name.partition(".")
        if scenario_id is None:
            scenario_id = this_scenario
        elif scenario_id != this_scenario:
            parser.error("all presets must belong to one scenario")

        manifest = get_scenario(this_scenario)
        if preset_name in manifest.presets:
            cls = load_preset(name)
            task = cls(**kwargs)
        elif preset_name in manifest.definitions:
            # Dynamic task definitions are expanded the way MAGMA-GEN does it.
            from magma_gen.task_generator.generator import TaskGenerator
            random.seed(entry_seed)
            cls = load_definition(name)
            task = TaskGenerator(args.max_tool_calls).generate(cls(**kwargs))
        else:
            parser.error(f"{name}: not a preset or definition of {this_scenario}: "
                         f"presets={list(manifest.presets)} definitions={list(manifest.definitions)}")
        # Tool API descriptions only need the class registry, not live agents.
        task._tools = task.Tools_cls([], {})
        stages = serialize_task_stages(task)
        spec = SpecGenerator(seed=entry_seed).generate_N_spec(task, 1)[0]
        randomizer = RuntimeRandomizer(spec)
        # What the agent reads must use the episode's public names, as its tools, attributes and
        # results do (magma-bench: "compiled stage presentations are already expressed in the
        # episode's public vocabulary"). Stage arguments stay canonical: goals and logs check them.
        stages = [_public_presentation(stage, randomizer.traduce_attributes_to_llm) for stage in stages]

        tools_type = f"{task.Tools_cls.__module__}:{task.Tools_cls.__qualname__}"
        key = (tools_type, task.maniskill_env_id)
        if key not in roots:
            path = out if not roots else out.with_name(f"{out.name}.{task.Tools_cls.__qualname__}")
            if key[0] in {k[0] for k in roots}:
                path = out.with_name(f"{out.name}.{task.Tools_cls.__qualname__}.{task.maniskill_env_id}")
            if path.exists():
                shutil.rmtree(path)
            path.mkdir(parents=True)
            roots[key] = Root(path)
            _dump(path / scenario_id / "scenario.json", ScenarioManifest(
                scenario_id=scenario_id,
                name=scenario_id,
                definition=f"{cls.__module__}:{cls.__qualname__}",
                environment_id=task.maniskill_env_id,
                tools_type=tools_type,
                skill_types=[],
                description=f"Locally compiled from magma_scenarios preset {name}",
            ))
        root = roots[key].path

        skeleton_id = f"skeleton_{index:03d}"
        semantic_id = "semantic_000"
        episode_id = f"{scenario_id}-{index:03d}-clean"
        n_calls = sum(int(getattr(s, "target_tool_calls", 1) or 0) for s in task.stages)
        _dump(root / scenario_id / skeleton_id / "skeleton.json", SkeletonManifest(
            skeleton_id=skeleton_id,
            scenario_id=scenario_id,
            track="in_domain",
            conditions=["clean"],
            source_definition=name,
            definition_arguments=encode_value(kwargs),
            generation_seed=entry_seed,
            requested_length_bucket="short",
            requested_tool_call_range=[n_calls, n_calls],
            initialization=task.get_initialization_spec(),
        ))
        _dump(root / scenario_id / skeleton_id / semantic_id / "semantic.json", SemanticManifest(
            semantic_id=semantic_id,
            variation_index=0,
            tools=encode_value(spec.tools),
            visible_attributes=encode_value(randomizer.get_randomized_attributes(task.get_init_attributes())),
            tool_equivalence=encode_value(spec.tool_equivalence),
            attributes_equivalence=spec.attributes_equivalence,
            reversed_attributes_equivalence=spec.reversed_attributes_equivalence,
            attribute_keys_order=spec.attribute_keys_order,
            attribute_values_order=spec.attribute_values_order,
        ))
        rel = f"{scenario_id}/{skeleton_id}/{semantic_id}/episodes/{episode_id}.json"
        _dump(root / rel, CompiledEpisodeSpec(
            episode_id=episode_id,
            scenario_id=scenario_id,
            skeleton_id=skeleton_id,
            condition="clean",
            interventions=[],
            stages=stages,
            semantic_id=semantic_id,
            metadata=EpisodeMetadata(
                clean_oracle_tool_calls=n_calls,
                episode_oracle_tool_calls=n_calls,
                length_bucket="short",
                number_of_stages=len(stages),
                number_of_interventions=0,
                intervention_lags=[],
                control_episode_id=episode_id,
            ),
        ))
        roots[key].entries.append(EpisodeIndexEntry(
            episode_id=episode_id, scenario_id=scenario_id, skeleton_id=skeleton_id,
            track="in_domain", semantic_id=semantic_id, condition="clean",
            length_bucket="short", path=rel,
        ))

    for root in roots.values():
        _write_index(root, scenario_id, args.version)
        print(f"wrote {len(root.entries)} episode(s) to {root.path}")
        print(f"root: {root.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
