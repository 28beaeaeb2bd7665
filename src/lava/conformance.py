"""`lava check URL`: a conformance probe for any MAGMA agent server (agent protocol 2.0).

MAGMA-GEN and MAGMA-BENCH abort a whole run on the first contract violation, often hours in;
this probe finds those violations in seconds. Each check sends requests shaped like the ones
the consumers really send (conformance_requests.json, copied from captured traffic) and tests
one rule of docs/protocol.md. Answers are validated with magma_core 2.0.1's own models when
they are importable, else with `lava.protocol`, which mirrors them field for field.

Exit status: 0 when no check failed (skips allowed), 1 when one did, 2 when the server is
unreachable.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.resources
import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
from pydantic import BaseModel, ValidationError

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
DEFAULT_TIMEOUT_S = 360.0  # MAGMA's own magma_agent_timeout: model-backed agents are slow
CONNECT_TIMEOUT_S = 10.0
MAX_DETAIL = 300

JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: str
    detail: str


class CheckFailed(Exception):
    pass


class CheckSkipped(Exception):
    pass


class Unreachable(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Contract:
    """The models an answer must satisfy, and where they came from (shown in the report)."""

    source: str
    health: type[BaseModel]
    info: type[BaseModel]
    output: type[BaseModel]


def load_contract() -> Contract:
    try:
        from magma_core.protocol import agent as models
    except ImportError:
        from . import protocol as models

        return Contract("lava.protocol (magma_core not installed)", models.AgentHealth, models.AgentInfo,
                        models.AgentOutput)
    from importlib.metadata import PackageNotFoundError, version

    try:
        source = f"magma_core {version('magma_core')}"
    except PackageNotFoundError:
        source = "magma_core"
    return Contract(source, models.AgentHealth, models.AgentInfo, models.AgentOutput)


@functools.cache
def _templates() -> dict[str, JsonDict]:
    text = importlib.resources.files(__package__).joinpath("conformance_requests.json").read_text("utf-8")
    return json.loads(text)["inputs"]


def template_input(name: str, *, id: int, n: int = 1, **fields: Any) -> JsonDict:
    """A fresh copy of a shipped input with its id and candidate count set."""
    entry = copy.deepcopy(_templates()[name])
    entry.update(id=id, num_outputs=n, **copy.deepcopy(fields))
    return entry


@dataclass(frozen=True, slots=True)
class Answer:
    """A 200 answer to a valid /v1/responses request, kept for the strict-types check."""

    check: str
    request: JsonDict
    text: str


class Probe:
    """An HTTP client for one agent server, plus every answer it received."""

    def __init__(self, client: httpx.Client, base_url: str, contract: Contract) -> None:
        self.client = client
        self.base_url = base_url
        self.contract = contract
        self.answers: list[Answer] = []
        self.current_check = ""

    def get(self, path: str) -> httpx.Response:
        return self.client.get(self.base_url + path)

    def post(self, body: bytes) -> httpx.Response:
        return self.client.post(self.base_url + "/v1/responses", content=body,
                                headers={"content-type": "application/json"})

    @staticmethod
    def request(inputs: list[JsonDict]) -> JsonDict:
        return {"request_id": uuid.uuid4().hex, "inputs": inputs}

    def respond(self, request: JsonDict) -> list[JsonDict]:
        """POST a valid request: the answer's outputs, parsed leniently (strict types are one check)."""
        response = self.post(json.dumps(request, allow_nan=False).encode())
        if response.status_code != 200:
            raise CheckFailed(f"a valid request got {_http_failure(response)}")
        try:
            outputs = response.json()
        except ValueError:
            raise CheckFailed(f"the answer is not JSON: {_snippet(response.text)}") from None
        if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
            raise CheckFailed(f"the answer must be a JSON array of output objects, got {_snippet(response.text)}")
        # Only arrays of objects reach strict-types: a wrong shape is the asking check's failure alone.
        self.answers.append(Answer(self.current_check, request, response.text))
        return outputs


# -- helpers -------------------------------------------------------------------------------------


def _snippet(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _canonical(value: Any) -> str:
    """Type-exact comparison key: json.dumps tells 1 from true and from 1.0, which == does not."""
    return json.dumps(value, sort_keys=True)


def _json_type(value: Any) -> str:
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                       (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; magma_core refuses NaN and Infinity")


def strict_json(text: str) -> Any:
    return json.loads(text, parse_constant=_refuse_constant)


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = ".".join(str(part) for part in first["loc"]) or "(body)"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc}: {first['msg']}{more}"


def _http_failure(response: httpx.Response) -> str:
    hint = "; pass --token" if response.status_code in (401, 403) else ""
    return f"HTTP {response.status_code}{hint}: {_snippet(response.text)}"


def _where(output: JsonDict) -> str:
    return f"source_id {output.get('source_id')!r} candidate {output.get('candidate_index')!r}"


def _fail_if(problems: list[str]) -> None:
    if problems:
        shown = "; ".join(problems[:3])
        raise CheckFailed(shown + (f"; and {len(problems) - 3} more" if len(problems) > 3 else ""))


# -- checks --------------------------------------------------------------------------------------


def check_health(probe: Probe) -> str:
    response = probe.get("/health")
    if response.status_code != 200:
        raise CheckFailed(f"HTTP {response.status_code} (MAGMA-BENCH aborts unless a ready agent answers 200): "
                          f"{_snippet(response.text)}")
    try:
        body = strict_json(response.text)
        probe.contract.health.model_validate(body)
    except ValueError as exc:  # ValidationError is a ValueError
        raise CheckFailed(f"{_snippet(response.text)} is not a valid AgentHealth: {exc}") from None
    if body != {"status": "ready"}:
        raise CheckFailed(f'answered {_snippet(response.text)}; send {{"status":"ready"}} explicitly')
    return '200 {"status":"ready"}'


def check_info(probe: Probe) -> str:
    response = probe.get("/v1/info")
    if response.status_code != 200:
        raise CheckFailed(_http_failure(response))
    try:
        info = strict_json(response.text)
    except ValueError as exc:
        raise CheckFailed(f"not JSON: {exc}") from None
    if not isinstance(info, dict):
        raise CheckFailed(f"the body must be a JSON object, got {_json_type(info)}")
    problems: dict[str, str] = {}
    if "protocol_version" not in info:
        # MAGMA-GEN reads the raw key before validation: the model's default does not help.
        problems["protocol_version"] = 'protocol_version missing (MAGMA-GEN requires an explicit "2.0")'
    elif info["protocol_version"] != "2.0":
        problems["protocol_version"] = f'protocol_version is {info["protocol_version"]!r}, not "2.0"'
    for key in ("agent_id", "agent_version"):
        if not isinstance(info.get(key), str):
            problems[key] = f"{key} must be a string, got {_json_type(info.get(key))}"
    capabilities = info.get("capabilities")
    if not isinstance(capabilities, dict):
        problems["capabilities"] = "capabilities must be an object of JSON booleans"
    else:
        not_booleans = [f"{k}={v!r}" for k, v in capabilities.items() if not isinstance(v, bool)]
        if not_booleans:
            problems["capabilities"] = f"capabilities must be JSON booleans: {', '.join(not_booleans)}"
        elif capabilities.get("inference") is not True:
            problems["capabilities"] = "capabilities.inference must be true (MAGMA-BENCH aborts otherwise)"
    try:
        probe.contract.info.model_validate(info)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            field = str(error["loc"][0]) if error["loc"] else "(body)"
            problems.setdefault(field, f"{probe.contract.source} rejects {'.'.join(map(str, error['loc']))}: "
                                       f"{error['msg']}")
    _fail_if(list(problems.values()))
    return f"{info['agent_id']} {info['agent_version']}, protocol 2.0, capabilities {_canonical(capabilities)}"


def check_empty_inputs(probe: Probe) -> str:
    outputs = probe.respond(probe.request([]))
    if outputs != []:
        raise CheckFailed(f"expected [], got {len(outputs)} outputs")
    return "[]"


def check_ordering(probe: Probe) -> str:
    # Ids out of numeric order, so an agent that sorts by id (or by anything but position) shows it.
    inputs = [
        template_input("press_button", id=2, n=2),
        template_input("make_coffee", id=0, n=1),
        template_input("bi_robot_sorting", id=1, n=3),
    ]
    outputs = probe.respond(probe.request(inputs))
    expected = [(entry["id"], index) for entry in inputs for index in range(entry["num_outputs"])]
    actual = [(o.get("source_id"), o.get("candidate_index")) for o in outputs]
    if len(actual) != len(expected):
        raise CheckFailed(f"{len(actual)} outputs for {len(expected)} candidates (the sum of num_outputs 2+1+3)")
    for position, (got, want) in enumerate(zip(actual, expected, strict=True)):
        if _canonical(got) != _canonical(want):
            raise CheckFailed(f"output {position} is source_id {got[0]!r} candidate {got[1]!r}, expected source_id "
                              f"{want[0]} candidate {want[1]} (input order, then candidate order)")
    return "ids 2, 0, 1 with 2+1+3 candidates: 6 outputs in input, then candidate, order"


def _times_recorded(history: Any, content: str) -> int:
    if not isinstance(history, list):
        return 0
    return sum(1 for turn in history if isinstance(turn, dict) and turn.get("content") == content)


SCENARIO_NOTES = {"visited": ["btn1"], "attempts": {"btn0": 0, "btn4": 1}, "last_robot": None}


def check_memory_independence(probe: Probe) -> str:
    memory = {"history": [], "scenario_notes": SCENARIO_NOTES}
    entry = template_input("press_button", id=0, n=3, memory=memory)
    outputs = probe.respond(probe.request([entry]))
    instruction = entry["instruction"]["content"]
    problems = []
    errors = 0
    for output in outputs:
        returned = output.get("memory")
        if not isinstance(returned, dict):
            problems.append(f"{_where(output)}: memory is {_json_type(returned)}, not an object")
        elif output.get("status") == "error":
            errors += 1
            if _canonical(returned) != _canonical(memory):
                problems.append(f"{_where(output)}: an error candidate must return the input memory unchanged")
        elif _canonical(returned.get("scenario_notes")) != _canonical(SCENARIO_NOTES):
            problems.append(f"{_where(output)}: the nested key scenario_notes did not come back unchanged")
        else:
            # One memory object shared by the candidates shows as the input recorded once per candidate.
            records = _times_recorded(returned.get("history"), instruction)
            if records > 1:
                problems.append(f"{_where(output)}: its history records this input {records} times; candidates "
                                "seem to share one memory object (deep-copy it per candidate)")
    _fail_if(problems)
    seen = f"{errors} error candidate(s) returned the input memory" if errors else "no error candidate to inspect"
    return f"{len(outputs)} candidates each returned their own memory with the nested key intact; {seen}"


SORTING_RULES = ["Never move a damaged object.", "Tell the user when every fruit is sorted."]


def check_memory_list(probe: Probe) -> str:
    inputs = [
        template_input("make_coffee", id=0, n=2),
        template_input("bi_robot_sorting", id=1, memory={"memory_list": SORTING_RULES, "history": []}),
    ]
    outputs = probe.respond(probe.request(inputs))
    rules_by_id = {entry["id"]: entry["memory"]["memory_list"] for entry in inputs}
    problems = []
    for output in outputs:
        source_id = output.get("source_id")
        if type(source_id) is not int or source_id not in rules_by_id:
            continue  # the ordering and strict-types checks report it
        returned = output.get("memory")
        rules = returned.get("memory_list") if isinstance(returned, dict) else None
        if rules is None:
            problems.append(f"{_where(output)}: memory_list missing from the returned memory")
        elif _canonical(rules) != _canonical(rules_by_id[source_id]):
            problems.append(f"{_where(output)}: memory_list came back as {_snippet(_canonical(rules), 80)}")
    _fail_if(problems)
    return f"memory_list returned exactly in all {len(outputs)} candidates of 2 inputs"


def _decision_key(output: JsonDict) -> str:
    error = output.get("error")
    return _canonical({"status": output.get("status"), "output": output.get("output"),
                       "error_code": error.get("code") if isinstance(error, dict) else error})


def _describe(output: JsonDict) -> str:
    if output.get("status") == "completed":
        return _snippet(json.dumps(output.get("output")), 90)
    error = output.get("error")
    return f"error {error.get('code') if isinstance(error, dict) else error!r}"


def check_deterministic_repeat(probe: Probe) -> str:
    inputs = [
        template_input("press_button", id=0, n=2, extra_keys={"inference_mode": True}),
        template_input("bi_robot_sorting", id=1),
    ]
    first = probe.respond(probe.request(inputs))
    # Another interaction under the same input ids in between: a server keeping history per id
    # (or per anything but the memory it is sent) answers the repeat differently.
    probe.respond(probe.request([template_input("make_coffee", id=0), template_input("make_coffee", id=1)]))
    second = probe.respond(probe.request(inputs))
    if len(first) != len(second):
        raise CheckFailed(f"the same request got {len(first)} then {len(second)} outputs")
    for before, after in zip(first, second, strict=True):
        if _decision_key(before) != _decision_key(after):
            raise CheckFailed(f"with inference_mode true, {_where(after)} decided {_describe(before)} "
                              f"then {_describe(after)}")
    return f"same request sent twice (another between): the same {len(first)} decisions"


def _next_instruction(decision: JsonDict) -> JsonDict:
    """What a consumer sends after executing `decision`: tool feedback, or the user's next message."""
    calls = [c for c in decision.get("tool_calls") or [] if isinstance(c, dict)]
    if not calls:
        return {"type": "user", "content": "Thank you, that is all for now."}
    infos = "\n".join(f"{c.get('target_robot_name')}: {c.get('name')} succeed with message: The action has completed."
                      for c in calls)
    previous = {c.get("target_robot_name"): {"name": c.get("name"), "arguments": c.get("arguments", {})}
                for c in calls}
    return {"type": "env", "content": json.dumps({"infos": infos, "previous_tool_call": previous})}


def check_follow_up(probe: Probe) -> str:
    entry = template_input("make_coffee", id=0)
    outputs = probe.respond(probe.request([entry]))
    chosen = next((o for o in outputs if o.get("status") == "completed" and isinstance(o.get("memory"), dict)
                   and isinstance(o.get("output"), dict)), None)
    if chosen is None:
        raise CheckSkipped("the first answer has no completed candidate to continue from")
    try:
        json.dumps(chosen["memory"], allow_nan=False)
    except ValueError:
        raise CheckSkipped("the returned memory holds NaN or Infinity, so no consumer can send it back") from None
    follow_up = {**entry, "instruction": _next_instruction(chosen["output"]), "memory": chosen["memory"]}
    try:
        answered = probe.respond(probe.request([follow_up]))
    except CheckFailed as exc:
        raise CheckFailed(f"a request built from the agent's own returned memory: {exc}") from None
    if len(answered) != 1:
        raise CheckFailed(f"the follow-up asked for 1 candidate and got {len(answered)} outputs")
    kind = follow_up["instruction"]["type"]
    return f"a follow-up ({kind} instruction, returned memory) answered: {answered[0].get('status')!r}"


def _bad_requests() -> list[tuple[str, bytes]]:
    base = {"request_id": uuid.uuid4().hex, "inputs": [template_input("press_button", id=0)]}

    def variant(change: Callable[[JsonDict], Any]) -> bytes:
        body = copy.deepcopy(base)
        change(body)
        return json.dumps(body).encode()  # allow_nan: the NaN case must reach the wire as written

    return [
        ("malformed JSON", json.dumps(base).encode()[:-7]),
        ("body is an array", b"[]"),
        ('num_outputs "2"', variant(lambda b: b["inputs"][0].update(num_outputs="2"))),
        ("num_outputs true", variant(lambda b: b["inputs"][0].update(num_outputs=True))),
        ("num_outputs 0", variant(lambda b: b["inputs"][0].update(num_outputs=0))),
        ("id 0.0", variant(lambda b: b["inputs"][0].update(id=0.0))),
        ("id \"0\"", variant(lambda b: b["inputs"][0].update(id="0"))),
        ("instruction missing", variant(lambda b: b["inputs"][0].pop("instruction"))),
        ("request_id missing", variant(lambda b: b.pop("request_id"))),
        ("request_id empty", variant(lambda b: b.update(request_id=""))),
        ("duplicate input ids", variant(lambda b: b["inputs"].append(copy.deepcopy(b["inputs"][0])))),
        ("extra key in request", variant(lambda b: b.update(session_id="abc"))),
        ("extra key in input", variant(lambda b: b["inputs"][0].update(priority=1))),
        ('instruction type "system"', variant(lambda b: b["inputs"][0]["instruction"].update(type="system"))),
        ("memory is an array", variant(lambda b: b["inputs"][0].update(memory=[]))),
        ("NaN in memory", variant(lambda b: b["inputs"][0].update(memory={"score": float("nan")}))),
    ]


def check_bad_input(probe: Probe) -> str:
    cases = _bad_requests()
    statuses: dict[str, int] = {}
    problems = []
    for label, body in cases:
        try:
            status = probe.post(body).status_code
        except httpx.TransportError as exc:
            problems.append(f"{label} -> {type(exc).__name__} (no HTTP answer)")
            continue
        statuses[label] = status
        if not 400 <= status < 500:
            problems.append(f"{label} -> {status}")
    if statuses and set(statuses.values()) <= {401, 403}:
        raise CheckSkipped("every request was refused for authentication; pass --token")
    _fail_if(problems)
    return f"{len(cases)} malformed requests, all 4xx ({', '.join(map(str, sorted(set(statuses.values()))))})"


def check_strict_types(probe: Probe) -> str:
    """Every 200 answer the other checks received, validated as the consumers validate it."""
    if not probe.answers:
        raise CheckSkipped("no /v1/responses answer to validate")
    problems = []
    outputs_seen = 0
    for answer in probe.answers:
        try:
            outputs = strict_json(answer.text)
        except ValueError as exc:
            problems.append(f"{answer.check}: {exc}")
            continue
        input_ids = [entry["id"] for entry in answer.request["inputs"]]
        for position, output in enumerate(outputs):
            outputs_seen += 1
            where = f"{answer.check} output {position}"
            try:
                probe.contract.output.model_validate(output)
            except ValidationError as exc:
                problems.append(f"{where}: {_first_error(exc)}")
                continue
            if output["request_id"] != answer.request["request_id"]:
                problems.append(f"{where}: request_id {output['request_id']!r} is not the request's")
            if output["source_id"] not in input_ids:
                problems.append(f"{where}: source_id {output['source_id']} names no input of the request")
    _fail_if(problems)
    return f"{outputs_seen} outputs in {len(probe.answers)} answers valid under {probe.contract.source}"


CHECKS: tuple[tuple[str, Callable[[Probe], str]], ...] = (
    ("health", check_health),
    ("info", check_info),
    ("empty-inputs", check_empty_inputs),
    ("ordering", check_ordering),
    ("memory-independence", check_memory_independence),
    ("memory-list", check_memory_list),
    ("deterministic-repeat", check_deterministic_repeat),
    ("follow-up", check_follow_up),
    ("bad-input", check_bad_input),
    # Last, because it validates the answers every check above received.
    ("strict-types", check_strict_types),
)
NAME_WIDTH = max(len(name) for name, _ in CHECKS)


def run_checks(url: str, *, timeout: float = DEFAULT_TIMEOUT_S, token: str | None = None,
               contract: Contract | None = None,
               on_result: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Every check against the agent at `url`; raises Unreachable when the first request cannot connect."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    contract = contract or load_contract()
    results: list[CheckResult] = []
    with httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)),
                      headers=headers) as client:
        probe = Probe(client, url.rstrip("/"), contract)
        for name, check in CHECKS:
            probe.current_check = name
            try:
                result = CheckResult(name, PASS, check(probe))
            except CheckFailed as exc:
                result = CheckResult(name, FAIL, str(exc))
            except CheckSkipped as exc:
                result = CheckResult(name, SKIP, str(exc))
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
                if not results:
                    raise Unreachable(f"{type(exc).__name__}: {exc}") from None
                result = CheckResult(name, FAIL, f"cannot connect any more ({type(exc).__name__}: {exc})")
            except httpx.TimeoutException:
                result = CheckResult(name, FAIL, f"no answer within --timeout {timeout:g} s")
            except httpx.TransportError as exc:
                result = CheckResult(name, FAIL, f"{type(exc).__name__}: {exc}")
            result = CheckResult(result.name, result.status, _snippet(result.detail, MAX_DETAIL))
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def render_row(result: CheckResult) -> str:
    return f"{result.name:<{NAME_WIDTH}}  {result.status:<6}  {result.detail}"


def render_summary(results: list[CheckResult]) -> str:
    counts = {status: sum(1 for r in results if r.status == status) for status in (PASS, FAIL, SKIP)}
    return f"{len(results)} checks: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    check = subparsers.add_parser("check", help="probe a running MAGMA agent server for protocol 2.0 conformance",
                                  description="Probe a running MAGMA agent server (any implementation) for "
                                              "conformance to agent protocol 2.0. Exit status: 0 all checks "
                                              "passed, 1 a check failed, 2 the server is unreachable.")
    check.add_argument("url", help="the agent's base URL, e.g. http://127.0.0.1:8888")
    check.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                       help=f"seconds allowed per request (default {DEFAULT_TIMEOUT_S:g}, MAGMA's own)")
    check.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    check.add_argument("--token", help="bearer token, for servers that require one")


def run(args: argparse.Namespace) -> int:
    url = args.url.rstrip("/")
    contract = load_contract()
    print(f"lava check {url}   (answers validated with {contract.source})", flush=True)
    printed: list[CheckResult] = []

    def show(result: CheckResult) -> None:
        # Row by row, flushed: against a model-backed agent the whole run can take many minutes.
        if not printed:
            print(f"\n{'check':<{NAME_WIDTH}}  {'result':<6}  detail")
        printed.append(result)
        print(render_row(result), flush=True)

    try:
        results = run_checks(url, timeout=args.timeout, token=args.token, contract=contract, on_result=show)
    except Unreachable as exc:
        print(f"\nlava check: {url} is unreachable: {exc}", file=sys.stderr)
        report: JsonDict = {"url": url, "reachable": False, "error": str(exc), "exit_code": 2, "results": []}
        exit_code = 2
    else:
        exit_code = 1 if any(r.status == FAIL for r in results) else 0
        print(f"\n{render_summary(results)}")
        report = {"url": url, "reachable": True, "validator": contract.source, "exit_code": exit_code,
                  "results": [asdict(r) for r in results]}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return exit_code


__all__ = ["CHECKS", "CheckResult", "Unreachable", "add_parser", "run", "run_checks"]
