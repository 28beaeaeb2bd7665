"""Procedures the rules spell out ("To prepare a coffee you must put the mug, place a capsule, then
start the machine"), expanded into the calls a request needs, executed without the model.

PROTOTYPE (diag-ml): a rule that names >= 2 tools by a distinctive word of their names (or by the
exact name) is a procedure, in the order the rule names them. A request runs it once per value it
asks for (a milky coffee and a milky coffee: two units) when a procedure tool takes a value; a
parameterless put-like step (drop_to_washing_machine) is preceded by a take of each requested
object. Values the request leaves out come from rules that associate names with them ("Perez, Lewis
like their coffee white"); objects a request only describes by such a value come from the same
rules ("all clothes that can be washed with detergent_TIDE").
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..tools import CANCEL_TOOL, ToolBox, ToolSpec
from .demos import roles
from .goals import INSTEAD_OF, listed, unavailable
from .task_state import mentioned, sentences, vocabulary

_VERBS = ("get", "set", "put", "place", "take", "press", "push", "insert", "load", "unload", "make", "do", "run",
          "stop", "move", "send", "detect", "scan", "list", "check", "grab", "pick", "drop", "release", "open",
          "close", "turn", "add", "remove", "use", "go", "launch", "call", "find", "lookup", "retrieve", "trigger")
_STOP = {"in", "to", "into", "on", "onto", "the", "a", "an", "of", "for", "from", "with", "and", "at", "by", "under"}
_GOAL = re.compile(r"^\s*(?:to|in order to)\s+[^,.]*?(?:,|\b(?:you|i|we)\s+(?:must|need to|have to|should)\b|"
                   r"\bmust\b)", re.I)
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_'\-]*")
_PUT = re.compile(r"\b(put|place|drop|deposit|release|unload|store)", re.I)
_LAST = re.compile(r"\b(?P<what>[a-z]+?)s?\s+(?:must\s+|should\s+)?(?:always\s+)?(?:be\s+)?"
                   r"(?:put|placed|added|loaded|inserted)\s+last\b", re.I)


def norm(word: str) -> str:
    w = word.lower().strip("'\"")
    if len(w) > 4 and re.search(r"(?:x|ss|sh|ch)es$", w):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


_NVERBS = {norm(v) for v in _VERBS}


def _parts(name: str) -> list[str]:
    return [p for p in re.split(r"[_\-\s']+", name) if p]


def keywords(toolbox: ToolBox) -> dict[str, set[str]]:
    """Per tool, the words of its name that no other tool's name has (verbs and small words aside)."""
    tools = [t for t in toolbox.tools if t.name != CANCEL_TOOL]
    own = {t.name: {norm(p) for p in _parts(t.name)} - _NVERBS - _STOP for t in tools}
    counts = Counter(w for words in own.values() for w in words)
    return {name: {w for w in words if counts[w] == 1} for name, words in own.items()}


def named_tools(text: str, toolbox: ToolBox) -> list[ToolSpec]:
    """Tools the text names, in order of first mention (the goal clause "To prepare a coffee" aside)."""
    goal = _GOAL.match(text)
    body = text[goal.end():] if goal else text
    keys = keywords(toolbox)
    first: dict[str, int] = {}
    for match in _TOKEN.finditer(body):
        raw = match.group(0)
        token = raw.strip("'")
        # a tool named as such: 'wash', start_cycle
        exact = body[max(0, match.start() - 1):match.start()] in ("'", '"', "`") or "_" in token
        subwords = {norm(p) for p in _parts(token)}
        for tool in toolbox.tools:
            if tool.name == CANCEL_TOOL or tool.name in first:
                continue
            if (exact and token.lower() == tool.name.lower()) or keys.get(tool.name, set()) & subwords:
                first[tool.name] = match.start()
        if exact and toolbox.get(token) is None and (renamed := _renamed_tool(token, toolbox, first)) is not None:
            first[renamed.name] = match.start()
    return sorted((t for t in toolbox.tools if t.name in first), key=lambda t: first[t.name])


def _renamed_tool(quoted: str, toolbox: ToolBox, named: Mapping[str, int]) -> ToolSpec | None:
    """The tool a rule quotes by a name no tool has: MAGMA-GEN renames tools but not the rules that
    quote them ("then use 'wash'" for a start_cycle that "Start[s] the washing machine"). It is the
    one tool not named yet whose name or description has the quoted word; none when that is not one."""
    word = norm(quoted)
    if not word or word in _NVERBS or word in _STOP:
        return None
    matches = [t for t in toolbox.tools if t.name != CANCEL_TOOL and t.name not in named
               and word in {norm(w) for w in _TOKEN.findall(f"{' '.join(_parts(t.name))} {t.description}")}]
    return matches[0] if len(matches) == 1 else None


def procedure(rules: Sequence[str], toolbox: ToolBox) -> tuple[list[ToolSpec], str] | None:
    """The rule naming the most tools (two at least; the latest on a tie), as (tools, goal clause)."""
    best: tuple[list[ToolSpec], str] | None = None
    for rule in rules:
        tools = named_tools(rule, toolbox)
        if len(tools) >= 2 and (best is None or len(tools) >= len(best[0])):
            goal = _GOAL.match(rule)
            best = (tools, goal.group(0) if goal else "")
    return best


# -- rules that associate names with values ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Group:
    members: tuple[str, ...]
    value: str


def groups(rules: Sequence[str], names: Mapping[str, str]) -> list[Group]:
    """"Florent, Emma like their coffee black and Perez, Lewis like their coffee white": each known
    value closes a group of the names (capitalized words or other known values) since the last one."""
    found = []
    for rule in rules:
        members: list[str] = []
        sentence_start = True
        for match in _TOKEN.finditer(rule):
            token = match.group(0).strip("'")
            if token in names:
                if members and all(names.get(m) != names[token] for m in members):
                    found.append(Group(tuple(members), token))
                    members = []
                    sentence_start = False
                    continue
                members.append(token)
            elif token[0].isupper() and not sentence_start and token.lower() not in _STOP:
                members.append(token)
            sentence_start = rule[match.end():match.end() + 2].startswith((".", "!", "?"))
    # A later rule is the latest word: "baseball_cap use detergent_TIDE" after "baseball_cap use
    # detergent_GAIN" leaves the cap one detergent (MAGMA-GEN laundry MainDefinition@504, a longer episode).
    latest: list[Group] = []
    given: set[tuple[str, str]] = set()  # (member, kind of value)
    for group in reversed(found):
        kind = names[group.value]
        members = tuple(m for m in group.members if (m, kind) not in given)
        given.update((m, kind) for m in group.members)
        if members:
            latest.append(Group(members, group.value))
    return latest[::-1]


# -- people a request serves ("make coffee for Lee and Clark") ------------------------------------

# "for Lee and Clark", "for Jackson, Alexis, and Perez" (the serial comma too).
_FOR_PEOPLE = re.compile(r"\bfor\s+(?P<who>[A-Z][\w'-]*(?:\s*(?:,\s*and\b|,|\band\b)\s*[A-Z][\w'-]*)*)")
_WANTING = re.compile(r"\b(?P<who>[A-Z][a-z][\w'-]*)\s+(?:wants|would like)\b")  # "Philippe wants a black coffee"


_DO_NOT = re.compile(r"^\s*(?:please\s+)?(?:do not|don't|never)\b", re.I)


def people(request: str, names: Mapping[str, str]) -> list[str]:
    """The people a request is for, in order ("for Lee and then the one for Clark": Lee, Clark); not
    those a sentence excludes ("Do not make the coffee for Scott. Please prepare only the coffee for Lee.")."""
    kept = [s for s in sentences(request) if not _DO_NOT.match(s)]
    found = _people_in(" ".join(kept), names)
    # "Use black coffee instead for Scott. Please make first the coffee for Lee and then the one for
    # Scott.": a sentence naming everyone gives the order.
    return next((order for s in kept if len(order := _people_in(s, names)) > 1 and set(order) == set(found)),
                found)


def _people_in(text: str, names: Mapping[str, str]) -> list[str]:
    found: list[str] = []
    for match in _FOR_PEOPLE.finditer(text):
        for who in re.split(r"\s*(?:,|\band\b)\s*", match["who"]):
            if who and who not in names and who.lower() not in _STOP and who not in found:
                found.append(who)
    return found


def _items(sentence: str) -> list[str]:
    """The items a sentence lists, split at commas and "and", except inside a list of people after
    "for" ("black coffee for Lee and Clark" is one item)."""
    protected = _FOR_PEOPLE.sub(lambda m: re.sub(r"\band\b", "\0", m.group(0).replace(",", "\1")), sentence)
    return [item.replace("\0", "and").replace("\1", ",")
            for item in re.split(r",|\band\b", protected) if item.strip()]


def preference(person: str, request: str, known: Sequence[Group], choices: Sequence[str],
               results: Sequence[str]) -> str | None:
    """What `person` takes: said next to them in the request ("Clark wants a black coffee"), else a
    rule's group ("Lee like their coffee black"), else their team's, once a lookup reported the team
    ("Florent in team RAP" and "team RAP prefers milky coffee")."""
    own = re.compile(rf"(?<![\w-]){re.escape(person)}(?![\w-])")
    # "a coffee for Walker, a white coffee, a coffee for Merlin": a coffee asked *for* someone, with no
    # value in its own part, takes theirs, not the value of the item beside it (MAGMA-GEN make_coffee
    # SimpleDefinition@505, a longer episode).
    for_them = re.compile(rf"\bfor\s+(?:[\w-]+\s*(?:,|\band\b)\s*)*{re.escape(person)}(?![\w-])")
    for sentence in re.split(r"[.;!?]", request):
        # By list item: "a coffee for Alexis and a milky coffee" is two (MAGMA-GEN make_coffee
        # SimpleDefinition@707, a longer episode: Alexis was given the milky one).
        named = [part for part in _items(sentence) if own.search(part)]
        if named and all(for_them.search(part) and not mentioned(part, choices) for part in named):
            continue
        # The narrowest part that names them and one value: the sentence ("Lee and Clark want black
        # coffee"), else its comma-separated parts, else those parts' "and" parts ("Jackson wants a
        # milky coffee, Alexis wants a milky coffee, and Perez wants a black coffee").
        for parts in ([sentence], sentence.split(","), re.split(r",|\band\b", sentence)):
            said = {value for part in parts if own.search(part) for value in mentioned(part, choices)}
            if len(said) == 1:
                return said.pop()
    mine = [g.value for g in known if person in g.members and g.value in choices]
    if mine:
        return mine[-1]
    for line in results:
        if own.search(line):
            others = set(_TOKEN.findall(line)) - {person}
            teams = [g.value for g in known if others & set(g.members) and g.value in choices]
            if teams:
                return teams[-1]
    return None


def team_lookup(toolbox: ToolBox) -> ToolSpec | None:
    """A tool that tells the team of a person ("Return the team a person belongs to.")."""
    for tool in toolbox.tools:
        if len(tool.params) == 1 and "team" in f"{tool.name} {tool.description}".lower() and re.search(
                r"\b(?:person|people)\b", f"{tool.params[0].name} {tool.params[0].description}", re.I):
            return tool
    return None


def team_members_tool(toolbox: ToolBox) -> ToolSpec | None:
    """A tool that lists a team's members ("Look up the registered members of a known team.")."""
    for tool in toolbox.tools:
        said = f"{tool.name.replace('_', ' ')} {tool.description}"
        asks_for = f"{tool.params[0].name} {tool.params[0].description}" if len(tool.params) == 1 else ""
        if (asks_for and re.search(r"\bteams?\b", said, re.I) and re.search(r"\b(?:members?|people|list)\b", said, re.I)
                and not re.search(r"\b(?:person|people)\b", asks_for, re.I)):
            return tool
    return None


_PEOPLE = r"[A-Z][\w-]*(?:\s*(?:,\s*and\b|,|\band\b)\s*[A-Z][\w-]*)*"
# "What team does Williams belong to?", "In which teams are Merlin and Solene?", "Perez's team".
_TEAM_OF = re.compile(rf"\b(?i:what|which)\s+(?i:teams?)\s+(?i:does|is|do|are)\s+(?P<people>{_PEOPLE})"
                      r"|\b(?P<owner>[A-Z][\w-]*)'s\s+team\b")
# "Who is in team GEPETTO?"
_WHO_IN = re.compile(r"\b(?i:who)\s+(?i:is|are)\s+(?i:in|on|part\s+of|a\s+member\s+of|the\s+members\s+of)\s+"
                     r"(?i:the\s+)?(?i:team)\s+(?P<team>[\w-]+)")

# "What are the coffee preferences of the members of team RAP?", "Which members of team RAP do not have a
# known coffee preference?", "Which members of team RAP like black coffee?"
_MEMBERS_OF = re.compile(r"\b(?i:members)\s+(?i:of)\s+(?i:the\s+)?(?i:team)\s+(?P<team>[\w-]+)")
_UNKNOWN_TASTE = re.compile(r"\b(?:do|does)\s+not\s+have\s+(?:a\s+|any\s+)?known\b", re.I)
_LIKING = re.compile(r"\blikes?\s+(?P<value>[\w-]+)\s+(?P<noun>[a-z]+)\b", re.I)
# "What coffee does Lee like?", "What is Lee's coffee preference?", "Which coffee like Lee?"
_TASTE_OF = re.compile(r"^\s*(?i:what|which)\s+(?P<noun>[a-z]+)\s+(?i:does)\s+(?P<p1>[A-Z][\w-]*)\s+(?i:like)\b"
                       r"|^\s*(?i:what)\s+(?i:is)\s+(?P<p2>[A-Z][\w-]*)'s\s+(?P<noun2>[a-z]+)\s+(?i:preference)\b"
                       r"|^\s*(?i:which)\s+(?P<noun3>[a-z]+)\s+(?i:likes?)\s+(?P<p3>[A-Z][\w-]*)\s*\?")


def tastes(rules: Sequence[str], attributes: Mapping[str, Any]) -> dict[str, str]:
    """Each person's own preference, from rules that group people with a value ("Hey, please remember
    that Lee and Clark like their coffee black"); a later rule wins. What a team prefers is not theirs."""
    names = vocabulary(attributes)
    return {m: g.value for g in groups(rules, names) for m in g.members if m not in names
            and not re.search(rf"\bteam\s+{re.escape(m)}\b", " ".join(rules), re.I)}


def taste_answer(question: str, rules: Sequence[str], attributes: Mapping[str, Any]) -> str | None:
    """"Lee likes black coffee." for a question about one person's preference, when a rule gives it."""
    m = _TASTE_OF.search(question)
    if m is None:
        return None
    person, noun = m["p1"] or m["p2"] or m["p3"], m["noun"] or m["noun2"] or m["noun3"]
    value = tastes(rules, attributes).get(person)
    return f"{person} likes {value} {noun.lower()}." if value else None


def _team_tastes(question: str, team: str, members: Sequence[str], known: Mapping[str, str]) -> str:
    """MAGMA's answers to the three questions about a team's preferences."""
    unknown = [p for p in members if p not in known]
    liking = _LIKING.search(question)
    noun = liking["noun"].lower() if liking else "coffee"
    if _UNKNOWN_TASTE.search(question):
        if not unknown:
            return f"All members of team {team} have a known {noun} preference."
        verb = "does" if len(unknown) == 1 else "do"
        return f"{listed(unknown)} {verb} not have any known {noun} preference in team {team}."
    if liking is not None and not re.search(r"\bpreferences\b", question, re.I):
        value = liking["value"]
        fans = [p for p in members if known.get(p, "").lower() == value.lower()]
        if not fans:
            return f"No member of team {team} has a known preference for {value} {noun}."
        return f"{listed(fans)} {'likes' if len(fans) == 1 else 'like'} {value} {noun} in team {team}."
    if len(unknown) == len(members):
        return f"No member of team {team} has a known {noun} preference."
    parts = [f"{p} likes {known[p]} {noun}" for p in members if p in known]
    if unknown:
        parts.append(f"{listed(unknown)} {'does' if len(unknown) == 1 else 'do'} not have any known {noun} preference")
    return f"In team {team}, {listed(parts)}."


def _looked_up(state: Any, lookup: ToolSpec) -> set[Any]:
    """Whom the lookup was called for in this request (answered or refused)."""
    return {next(iter((c.get("arguments") or {}).values()), None)
            for c in [*state.done_calls, *state.failed] if c["name"] == lookup.name}


def team_answer(situation: Any, state: Any) -> Any:
    """A question about people's teams ("What team does Williams belong to?", "In which teams are
    Merlin and Solene?") or a team's members ("Who is in team GEPETTO?") with the registry's lookup
    tools: each lookup first, then the answer in words (MAGMA's question stages allow that tool
    before the answer, and want it called: what an earlier lookup said is no answer)."""
    from ..protocol import AgentDecision, ToolCall
    robot = (situation.toolbox.robots or ("robot",))[0]
    looked = (state.notes.get("procedures") or {})
    members_tool, team = team_members_tool(situation.toolbox), _WHO_IN.search(state.request)
    team = team or _MEMBERS_OF.search(state.request)
    if members_tool is not None and team is not None:
        name = team["team"]
        if name not in _looked_up(state, members_tool):
            return AgentDecision(tool_calls=[ToolCall(name=members_tool.name,
                                                      arguments={members_tool.params[0].name: name},
                                                      target_robot_name=robot)])
        listing = (looked.get("members") or {}).get(name, "").split(":", 1)[-1]  # "people in X : ['A', 'B']"
        members = re.findall(r"'([^']+)'", listing) or re.findall(r"\b[A-Z][\w-]*", listing)
        if not members:
            return None  # refused, or said otherwise: the model answers from what the lookup said
        if _MEMBERS_OF.search(state.request):
            rules = [*situation.memory.memory_list, *state.rules]
            return AgentDecision(say=_team_tastes(state.request, name, members, tastes(rules, situation.attributes)))
        return AgentDecision(say=f"{listed(members)} {'is' if len(members) == 1 else 'are'} in team {name}.")
    lookup, match = team_lookup(situation.toolbox), _TEAM_OF.search(state.request)
    if lookup is None or match is None:
        return None
    persons = [p for p in re.split(r"\s*(?:,|\band\b)\s*", match["people"] or match["owner"]) if p]
    for person in persons:
        if person not in _looked_up(state, lookup):
            return AgentDecision(tool_calls=[ToolCall(name=lookup.name, arguments={lookup.params[0].name: person},
                                                      target_robot_name=robot)])
    parts = []
    for person in persons:
        result = (looked.get("teams") or {}).get(person, state.last_feedback)
        said = re.search(rf"\b{re.escape(person)}\b[^.\n]*?\bteam\s+(?P<team>[\w-]+)", result)
        if said is None or said["team"].lower() == "none":
            return None  # the model answers from what the lookup said
        parts.append(f"{person} is in team {said['team']}")
    return AgentDecision(say=f"{listed(parts)}.")


# -- the calls a request needs ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    tool: ToolSpec
    value: str | None = None


@dataclass(frozen=True, slots=True)
class Reading:
    """A rule's procedure and the names around it, read once per turn: its tools in order, its goal
    clause, the attributes' vocabulary (value -> the attribute listing it) and the rules' groups."""
    tools: list[ToolSpec]
    goal: str
    names: dict[str, str]
    known: list[Group]


def read(rules: Sequence[str], toolbox: ToolBox, attributes: Mapping[str, Any]) -> Reading | None:
    """None when no rule names a procedure."""
    found = procedure(rules, toolbox)
    if found is None:
        return None
    names = vocabulary(attributes)
    return Reading(found[0], found[1], names, groups(rules, names))


def plan(request: str, rules: Sequence[str], toolbox: ToolBox, attributes: Mapping[str, Any],
         results: Sequence[str] = ()) -> list[Step] | None:
    """The calls the request needs, in order; None when no rule's procedure serves it. A request for
    people whose preference is not known plans nothing either (see `unknown_people`)."""
    found = read(rules, toolbox, attributes)
    return None if found is None else planned(found, request, rules, toolbox, results)


def planned(found: Reading, request: str, rules: Sequence[str], toolbox: ToolBox, results: Sequence[str] = ()
            ) -> list[Step] | None:
    """`plan`, with the rules read already."""
    tools, goal, names, known = found.tools, found.goal, found.names, found.known
    observe, take, put = roles(toolbox)
    if take is not None and put is not None:
        return None  # pick-and-place with named places: goals.py owns it
    if any(t.name != CANCEL_TOOL and not t.params and t not in tools and t is not observe for t in toolbox.tools):
        # A bare action the rule's words did not reach (a renamed launch_brewing_cycle for "start the
        # machine"): a plan without it would stop short, so the model plans instead. Tools with
        # parameters outside the rule are lookups (get_person_team), not steps.
        return None
    removed = {m["old"] for m in INSTEAD_OF.finditer(request)}
    wanted = [v for v in mentioned(request, names) if v not in removed]
    # "Use black coffee instead of milky. Please make these coffees in this exact order: black.": the
    # substitution names what the list then asks for, once (MAGMA-GEN make_coffee SimpleDefinition@705).
    said = [(INSTEAD_OF.search(s) is not None, mentioned(s, names)) for s in sentences(request)]
    listed_after = [v for swap, values in said if not swap for v in values]
    substituted = {v for swap, values in said if swap for v in values} - removed
    if substituted and substituted <= set(listed_after):
        wanted = [v for v in listed_after if v not in removed]
    request_words = {norm(w) for w in _TOKEN.findall(request)} - _STOP
    goal_words = {norm(w) for w in _TOKEN.findall(goal)} - _STOP - {"to"}
    if not wanted and not (request_words & goal_words):
        pass  # only when associations give something (below)
    attrs_wanted = {names[v] for v in wanted}
    # Values the request leaves out, from the names it mentions ("Perez" -> white).
    words = set(_TOKEN.findall(request))
    for attribute in {names[g.value] for g in known} - attrs_wanted:
        values = {g.value for g in known if names[g.value] == attribute and words & set(g.members)}
        if len(values) == 1:
            wanted.append(values.pop())
    # Objects the request only describes by a value ("all clothes ... detergent_TIDE").
    if wanted and all(names[v] == names[wanted[0]] for v in wanted):
        members = [m for g in known if g.value in wanted for m in g.members if m in names]
        wanted = [*members, *wanted]
    if not wanted and not (request_words & goal_words):
        return None
    valued = [t for t in tools if t.params]
    if valued and _about_people(known, toolbox) and (served := people(request, names)):
        # One unit per person, with what each one takes; none while one is not known.
        choices = _choices(valued[0], names, known)
        units = _mixed_units(request, served, choices) or served
        units = [preference(u, request, known, choices, results) if u in served else u for u in units]
        if None in units:
            return None
        return [Step(t, value if t.params else None) for value in units for t in tools]
    if valued:  # one unit per value asked for: "a milky coffee and a milky coffee"
        units = [v for v in wanted] or [None]
        return [Step(t, value if t.params else None) for value in units for t in tools]
    drop = next((t for t in tools if not t.params and _PUT.search(t.name.replace("_", " ") + " " + t.description)),
                None)
    if drop is None or take is None:
        return [Step(t) for t in tools]
    if (units := _in_turn(found, request)) is not None:
        # One load-and-run per unit, in the order said: the calls match the steps as a multiset, so a
        # second wash's drops are told apart from the first's by the steps before them.
        steps_in_turn = [planned(found, unit, rules, toolbox, results) for unit in units]
        if all(steps_in_turn):
            return [step for unit_steps in steps_in_turn for step in unit_steps or ()]
    if not wanted:
        return None  # what to load is unknown: the model decides
    last = {m["what"].lower() for rule in rules for m in _LAST.finditer(rule)}
    objects = sorted(dict.fromkeys(wanted), key=lambda o: any(w in o.lower() for w in last))
    steps: list[Step] = []
    for tool in tools:
        if tool is drop:
            for thing in objects:
                steps += [Step(take, thing), Step(drop)]
        else:
            steps.append(Step(tool))
    return steps


# "Ok, do 2 washes in this exact order: first wash briefs with detergent_TIDE, then wash gym_shorts
# with detergent_GAIN." (MAGMA's answer to "These clothes require different detergents.").
_THEN = re.compile(r",?\s*\b(?:and\s+)?then\b\s*", re.I)


def _mixed_units(request: str, served: Sequence[str], choices: Sequence[str]) -> list[str] | None:
    """People and plain values in the order the request lists them ("a coffee for Walker, a white coffee,
    a coffee for Merlin, and a coffee for Scott": Walker, white, Merlin, Scott; "..., then please also
    make a black coffee" adds black after them), when it asks for at least one value for no one; None
    otherwise (the people, in order, are the units)."""
    units: list[str] = []
    plain = False
    for sentence in re.split(r"[.;!?]", request):
        listed: list[str] = []
        for item in (item for item in re.split(r",|\band\b", sentence) if item.strip()):
            who = [p for p in served if re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", item)]
            values = mentioned(item, choices)
            if len(who) == 1 and who[0] not in units and who[0] not in listed:
                listed.append(who[0])
            elif not who and len(set(values)) == 1:
                listed.append(values[0])
                plain = True
        units += listed
    return units if plain and set(served) <= set(units) else None


def _in_turn(found: Reading, request: str) -> list[str] | None:
    """The parts of a request that does one unit after another, each naming things and the one value
    they take ("first wash briefs with detergent_TIDE", "then wash gym_shorts with detergent_GAIN")."""
    parts = [part for part in _THEN.split(request) if part.strip()]
    if len(parts) < 2:
        return None
    value_kinds = {found.names[g.value] for g in found.known}
    for part in parts:
        said = mentioned(part, found.names)
        values = {v for v in said if found.names[v] in value_kinds}
        if len(values) != 1 or len(values) == len(set(said)):
            return None
    return parts


def _choices(tool: ToolSpec, names: Mapping[str, str], known: Sequence[Group]) -> list[str]:
    """The values a valued procedure tool takes: those of the attribute the rules' groups use."""
    attributes = Counter(names[g.value] for g in known)
    if not attributes:
        return list(names)
    attribute = attributes.most_common(1)[0][0]
    return [v for v, a in names.items() if a == attribute]


def unknown_people(found: Reading, request: str, toolbox: ToolBox, results: Sequence[str]
                   ) -> tuple[list[str], list[str]]:
    """(people the request is for whose preference nothing says, the values they could take) when
    the procedure has a valued step ("Please make coffee for Lee and Clark" where only Lee's taste
    is known)."""
    if not (valued := [t for t in found.tools if t.params]):
        return [], []
    names, known = found.names, found.known
    if not _about_people(known, toolbox):
        return [], []
    choices = _choices(valued[0], names, known)
    return [p for p in people(request, names) if preference(p, request, known, choices, results) is None], choices


def refused_people(rules: Sequence[str], toolbox: ToolBox, attributes: Mapping[str, Any], request: str,
                   results: Sequence[str]) -> list[str]:
    """The people a request is for whose preference a rule says is gone ("Philippe wants a black
    coffee" after "There are no black capsules left for now"): whom a refusal names, as MAGMA's judge
    wants it ("inform that Philippe cannot be served because black coffee is unavailable")."""
    found = read(rules, toolbox, attributes)
    return [] if found is None else _refused(found, rules, toolbox, request, results)


def _refused(found: Reading, rules: Sequence[str], toolbox: ToolBox, request: str, results: Sequence[str]
             ) -> list[str]:
    """`refused_people`, with the rules read already."""
    if not _about_people(found.known, toolbox) or not (valued := [t for t in found.tools if t.params]):
        return []
    choices = _choices(valued[0], found.names, found.known)
    wanting = [m["who"] for m in _WANTING.finditer(request)
               if m["who"] not in found.names and m["who"].lower() not in _STOP]
    return [p for p in dict.fromkeys([*people(request, found.names), *wanting])
            if (value := preference(p, request, found.known, choices, results)) is not None
            and unavailable(rules, f"{value} {found.names[value]}") is not None]  # "white coffee_pod"


def after_refused_people(rules: Sequence[str], toolbox: ToolBox, attributes: Mapping[str, Any], refused: str,
                         message: str, results: Sequence[str]) -> str | None:
    """The request that goes on from one refused for someone's preference ("Camille wants a milky coffee
    and Theo wants a black coffee. Please make first the coffee for Camille and then the one for Theo."
    while black is gone, then "Use milky coffee instead for Theo. Please make first the coffee for
    Camille and then the one for Theo."): the message, with what the refused request said of the people
    it names and gives nothing (Camille wants milky). None when it needs nothing from the refused one."""
    found = read(rules, toolbox, attributes)
    if found is None or not _refused(found, rules, toolbox, refused, results):
        return None
    choices = _choices(next(t for t in found.tools if t.params), found.names, found.known)
    carried = [f"{person} wants {value}." for person in people(message, found.names)
               if preference(person, message, found.known, choices, results) is None
               and (value := preference(person, refused, found.known, choices, results)) is not None]
    return " ".join([message.strip(), *carried]) if carried else None


def missing_value_question(found: Reading, request: str) -> str | None:
    """MAGMA's laundry questions, when the request names things but not the value their procedure
    takes, and the rules give none or several: "Which detergent should I use for t_shirt?" (no rule
    gives t_shirt a detergent), "These clothes require different detergents. What should I do?"."""
    names, known = found.names, found.known
    member_kinds = {names[m] for g in known for m in g.members if m in names}
    if len(member_kinds) != 1:
        return None  # people's tastes (their names are no attribute): unknown_people asks about them
    members, valued = member_kinds.pop(), {names[g.value] for g in known}
    if len(valued) != 1:
        return None
    value_kind = valued.pop()
    said = mentioned(request, names)
    asked_for = list(dict.fromkeys(v for v in said if names[v] == members))
    if not asked_for or any(names[v] == value_kind for v in said):
        return None
    given = {m: g.value for g in known for m in g.members}  # a later rule regroups a thing
    unassigned = [thing for thing in asked_for if thing not in given]
    if unassigned:
        return f"Which {value_kind.removesuffix('s')} should I use for {listed(unassigned)}?"
    if len({given[thing] for thing in asked_for}) > 1:
        return f"These {members} require different {value_kind}. What should I do?"
    return None


def _about_people(known: Sequence[Group], toolbox: ToolBox) -> bool:
    """Whether the task deals in people's preferences: rules give some, or a tool looks up teams."""
    return bool(known) or team_lookup(toolbox) is not None


def next_step(steps: Sequence[Step], done_calls: Sequence[Mapping[str, Any]]) -> Step | None:
    """The first step not yet matched by a successful call (calls match steps as a multiset)."""
    done = Counter((c["name"], next(iter((c.get("arguments") or {}).values()), None)) for c in done_calls)
    for step in steps:
        key = (step.tool.name, step.value)
        if done[key] > 0:
            done[key] -= 1
        else:
            return step
    return None


_RUNNING = re.compile(r"^\s*RUNNING\s+(?P<name>[\w\-]+)\((?P<args>.*)\)\s*$", re.I)


def suspended(status: str) -> tuple[str, str | None] | None:
    match = _RUNNING.match(status or "")
    if match is None:
        return None
    args = match["args"].strip()
    value = args.split("=", 1)[1].strip() if "=" in args else None
    return match["name"], value


class ProceduresSkill:
    """Requests a rule's procedure serves (make_coffee, laundry): every call from the plan, no model."""

    name = "procedures"

    def observe(self, situation, state, notes) -> None:
        # Progress is replayed from the calls that succeeded; only what a team lookup said is kept
        # ("Clark in team GEPETTO"), for every later step of the request.
        if situation.feedback is None or (lookup := team_lookup(situation.toolbox)) is None:
            return  # a registry has both lookups
        from .task_state import results_with_calls
        for result, call in results_with_calls(situation.feedback, state):
            person = next(iter((call.get("arguments") or {}).values()), None)
            if result.ok and call["name"] == lookup.name and isinstance(person, str):
                notes["teams"] = {**notes.get("teams", {}), person: result.message}
            elif result.ok and (members := team_members_tool(situation.toolbox)) is not None and \
                    call["name"] == members.name and isinstance(person, str):
                notes["members"] = {**notes.get("members", {}), person: result.message}

    def next(self, situation, state, notes):
        from ..protocol import AgentDecision, ToolCall
        robots = situation.toolbox.robots or ("robot",)
        if len(robots) > 1 or state.failures_in_row >= 3:
            return None
        rules = [*situation.memory.memory_list, *state.rules]
        found = read(rules, situation.toolbox, situation.attributes)
        if found is None:
            return None
        results = [*state.observations, state.last_feedback, *(notes.get("teams") or {}).values()]
        missing, choices = unknown_people(found, state.request, situation.toolbox, results)
        if missing:
            return self.ask_about(situation, state, missing, choices, robots[0], rules)
        request = self.with_the_answer(state.request, notes, found.names)
        if (question := missing_value_question(found, request)) is not None:
            notes["asked"] = request
            return AgentDecision(say=question)
        steps = planned(found, request, rules, situation.toolbox, results)
        if not steps:
            return None
        step = next_step(steps, state.done_calls)
        if step is not None and step == steps[0]:
            # What a team prefers, found only now, can be what a rule said is gone ("white coffee is
            # not available anymore"): nothing is started, and saying so is the answer.
            from .magma import refusal
            gone = unavailable(rules, " ".join([state.request, *(s.value for s in steps if s.value)]))
            if gone is not None:
                return refusal(state, gone, _refused(found, rules, situation.toolbox, state.request, results))
        if step is None:
            from .magma import completion_message
            notes.pop("asked", None)  # answered and done: a later request naming a value is a new one
            return AgentDecision(say=completion_message(state))
        arguments = {step.tool.params[0].name: step.value} if step.value is not None and step.tool.params else {}
        return AgentDecision(tool_calls=[ToolCall(name=step.tool.name, arguments=arguments,
                                                  target_robot_name=robots[0])])

    @staticmethod
    def with_the_answer(request: str, notes: dict[str, Any], names: Mapping[str, str]) -> str:
        """The request lava asked about, with this one when it answers ("Please wash gym_shorts and
        t_shirt", then "Use detergent_GAIN for this time."): it names a value and no thing to work on."""
        asked = notes.get("asked")
        if not asked or asked == request:
            return request
        things = {names[m] for m in mentioned(asked, names)}
        said = mentioned(request, names)
        if said and not any(names[v] in things for v in said):
            joint = "" if asked.rstrip()[-1:] in ".!?" else "."
            return f"{asked}{joint} {request}"
        notes.pop("asked")  # a new request: the question is behind
        return request

    @staticmethod
    def ask_about(situation, state, missing: list[str], choices: list[str], robot: str, rules: Sequence[str]):
        """Look up the team of the first person nothing is known of, when the rules speak of teams
        ("first use the team registry to find their team") and it was not asked yet; then say whose
        preference is missing (making something they did not ask for fails the stage; so does a
        lookup no rule asked for, where the stage wants words only)."""
        from ..protocol import AgentDecision, ToolCall
        lookup = team_lookup(situation.toolbox)
        if lookup is not None and re.search(r"\bteams?\b", " ".join(rules), re.IGNORECASE):
            looked = _looked_up(state, lookup)
            person = next((p for p in missing if p not in looked), None)
            if person is not None:
                return AgentDecision(tool_calls=[ToolCall(name=lookup.name, arguments={lookup.params[0].name: person},
                                                          target_robot_name=robot)])
        one = len(missing) == 1
        return AgentDecision(say=f"{listed(missing)} {'does' if one else 'do'} not have any known preference yet. "
                                 f"Which one would {missing[0] if one else 'each of them'} like: "
                                 f"{listed(choices).replace(' and ', ' or ')}?")


__all__ = ["Group", "ProceduresSkill", "Reading", "Step", "after_refused_people", "groups", "keywords",
           "missing_value_question", "named_tools", "next_step", "people", "plan", "planned", "preference", "procedure",
           "read", "refused_people", "suspended",
           "taste_answer", "tastes", "team_answer", "team_lookup", "team_members_tool", "unknown_people"]
