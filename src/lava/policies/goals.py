"""Pick-and-place requests as goals over a scene, and the next take or put that serves them.

A 0.5B model picks plausible but wrong objects ("take yellow" for "a yellow cube from the yellow
tray") and loses count after a few moves; every wasted call eats a stage budget of three or four.
The common request forms are precise enough to act on without the model:

- sorting: "sort all the cubes by color: put each cube in the tray matching its color", each
  object goes to the one place sharing a word with its name (white_cube_2 -> white_tray), with
  exceptions such as "leave 2 white cubes on the table" and rules such as "always sort all blue
  cubes first";
- explicit moves: "move one yellow cube from the yellow tray to the table", in order.

Anything else (opposite groups, counting puzzles, unknown phrasing) is None here and goes to the
model. Descriptions are matched to names by their words, so renamed tools and values still work.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..tools import ToolSpec
from .scene import where

_COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10}
NUMBER = r"(?:\d+|" + "|".join(_COUNTS) + r")"  # a count in digits or words ("2", "two", "a")
NUMBER_WORDS = frozenset(_COUNTS) - {"a", "an"}  # the words that can only be counts
STATED = r"(?:\d+|" + "|".join(NUMBER_WORDS) + r")"  # a count said as one ("2", "two"; not "a")
_COUNT = rf"(?P<count>{NUMBER})"
_PHRASE = r"[A-Za-z][\w\s-]*?"
_END = r"(?=\s*(?:[.,;:!]|$|\band\b|\bthen\b))"
_MOVE = re.compile(rf"\b(?:move|bring|transfer|put|place|take)\s+{_COUNT}\s+(?P<what>{_PHRASE})\s+from\s+(?:the\s+)?"
                   rf"(?P<source>{_PHRASE})\s+(?:to|into|onto|in|on)\s+(?:the\s+)?(?P<target>{_PHRASE}){_END}",
                   re.IGNORECASE)
_KEEP = re.compile(rf"\b(?:leave|keep)\s+{_COUNT}\s+(?P<what>{_PHRASE})\s+(?:on|in|at|inside)\s+(?:the\s+)?"
                   rf"(?P<target>{_PHRASE}){_END}", re.IGNORECASE)
_SORT = re.compile(r"\bsort|\bmatching\b|\bwhere (?:it|they) belongs?\b", re.IGNORECASE)
_CONTRARY = re.compile(r"\b(opposite|other|swap|cross|mismatch\w*|wrong)\b", re.IGNORECASE)
_FIRST = re.compile(rf"\b(?:sort|move|handle|place|put|do)\s+(?:all\s+)?(?:the\s+)?(?P<what>{_PHRASE})\s+first\b",
                    re.IGNORECASE)
_FORGET = re.compile(r"\b(forget|ignore|drop|no longer|stop)\b", re.IGNORECASE)
# "Remove all objects from the table", "Clear the table", and MAGMA's CleanTable request "Clean the table."
# (the rules say what cleaning it means: "removing all food and dishware from it").
_CLEAR = re.compile(rf"\b(?:remove|clear|take|empty|clean(?:\s+up)?)\s+"
                    rf"(?:(?:all|every|each)\s+(?:of\s+)?(?:the\s+)?(?:[a-z]+\s+)?(?:from|off)\s+)?"
                    rf"(?:the\s+)?(?P<place>{_PHRASE}){_END}", re.IGNORECASE)
_GONE = re.compile(r"\b(?:there (?:is|are) no|no more|out of|ran out of|run out of)\s+(?P<what>[a-z][\w\s-]*?)"
                   r"\s*(?:\bleft\b|\banymore\b|\bany more\b|\bavailable\b|\bin stock\b|\buntil\b|\bfor now\b|"
                   r"\bfor the moment\b|\bat the moment\b|[.,;!]|$)", re.IGNORECASE)
# MAGMA's restocking messages ("white coffee is available again.", "We have white capsules again
# now.", "The white capsules have been restocked.", "You can use white coffee again now."): the
# things they name are no longer gone.
_BACK = re.compile(r"\b(?:(?:is|are)\s+(?:available|in stock)\s+again|(?:has|have)\s+been\s+restocked|back in stock|"
                   r"(?:can|may)\s+use\b[\w\s-]*\bagain|we have\b[\w\s-]*\bagain)\b", re.IGNORECASE)
# What a thing comes in: "no white capsules left" is white coffee gone.
_UNITS = {"capsule", "pod", "cartridge", "pack", "packet", "bag", "stock"}
# "white coffee is not available anymore", "black and white coffee are unavailable": the things are
# the few words before the verb, so "Note that white coffee ..." is still white coffee.
_GONE_AFTER = re.compile(r"(?P<what>(?:[a-z][\w-]*,?\s+){0,4}[a-z][\w-]*)\s+(?:is|are)\s+(?:not available|no longer "
                         r"available|unavailable|out of stock|not in stock|sold out)\b", re.IGNORECASE)
_NOT_THE_THING = {"that", "note", "the", "a", "an", "please", "now", "today", "remember", "and", "but", "so"}


def words(text: str) -> set[str]:
    """Lower-case words, singular, without numbers: "Blue cubes" and blue_cube_2 share {blue, cube}."""
    return set(_words(text))


def tool_words(tool: ToolSpec) -> set[str]:
    """The words of a tool's name and description (take_box: {take, box, ...})."""
    return words(f"{tool.name.replace('_', ' ')} {tool.description}")


@functools.lru_cache(maxsize=4096)  # the same requests, rules and names are read on every turn
def _words(text: str) -> frozenset[str]:
    found = set()
    for word in re.split(r"[^a-z0-9]+", text.lower()):
        if not word or word.isdigit() or word in ("the", "of", "a", "an", "all", "each", "every", "any"):
            continue
        if len(word) > 4 and re.search(r"(?:x|ss|sh|ch)es$", word):
            word = word[:-2]  # boxes -> box, glasses -> glass
        elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        found.add(word)
    return frozenset(found)


def listed(things: Sequence[str]) -> str:
    """"a", "a and b", "a, b, and c": MAGMA's own lists (magma_core.utils.text_utils), serial comma and all."""
    if len(things) <= 2:
        return " and ".join(things)
    return f"{', '.join(things[:-1])}, and {things[-1]}"


def number(text: str) -> int:
    """The value of a count `NUMBER` matched."""
    return int(text) if text.isdigit() else _COUNTS[text.lower()]


@dataclass(frozen=True, slots=True)
class Move:
    what: frozenset[str]
    source: str | None
    target: str
    name: str | None = None  # the exact object, when the request or a rule names it (no scene needed)


@dataclass
class Goal:
    """Either ordered unit moves, or sorting by name with exceptions and a priority."""
    moves: list[Move] = field(default_factory=list)
    sort: bool = False
    keep: list[tuple[int, frozenset[str], str]] = field(default_factory=list)
    first: frozenset[str] | None = None
    clear: str | None = None  # a place to empty; where each object goes is the model's choice
    spare: frozenset[str] = frozenset()  # words of things the rules use as tools (the sponge): they stay
    fill: str | None = None  # a place that must end up holding exactly `items` (a tray, a box)
    items: list[str] = field(default_factory=list)


def place_named(phrase: str, places: Iterable[str]) -> str | None:
    """The place a phrase names ("the blue tray" -> blue_tray), when exactly one fits."""
    wanted = words(phrase)
    if not wanted:
        return None
    places = list(places)
    exact = [p for p in places if words(p) == wanted]
    if len(exact) == 1:
        return exact[0]
    partial = [p for p in places if wanted <= words(p)]
    return partial[0] if len(partial) == 1 else None


_INSTEAD = re.compile(r"\b(?P<new>[A-Za-z][\w-]*)\s+instead\s+of\s+(?:the\s+)?(?P<old>[A-Za-z][\w-]*)", re.I)
_REPLACE = re.compile(r"\breplace\s+(?:the\s+)?(?P<old>[A-Za-z][\w-]*)\s+(?:with|by)\s+"
                      r"(?:the\s+)?(?P<new>[A-Za-z][\w-]*)", re.I)
_WITHOUT = re.compile(r"\b(?:without|except|minus|but no|not the)\s+(?:the\s+|any\s+)?(?P<old>[A-Za-z][\w-]*)", re.I)
_REFERS = re.compile(r"\b(default|usual|standard|regular|same)\b", re.I)
# A rule that defines the default ("same" refers too, but "never on the same tray" is no recipe).
_DEFINES_DEFAULT = re.compile(r"\b(?:default|usual|standard|regular)\b|\bnew recipe is\b", re.I)
# What a substitution drops ("use black coffee instead of milky": milky).
INSTEAD_OF = re.compile(r"\binstead\s+of\s+(?:the\s+)?(?P<old>[\w-]+)", re.I)
_COMPOSE = re.compile(r"\b(contain\w*|with|recipe|instead of|made of|consisting|tray|box|plate|bowl)\b", re.I)


def _named(text: str, things: Sequence[str]) -> list[str]:
    found = [(m.start(), t) for t in things
             for m in re.finditer(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text, re.I)]
    return list(dict.fromkeys(t for _, t in sorted(found)))


def default_recipe(rules: Sequence[str], things: Sequence[str]) -> list[str]:
    """The default recipe the rules arrive at, in order: one sets it ("The default tray recipe is
    pasta and apple", "Replace the standard tray recipe with ananas and milk"), one edits it ("In the
    default recipe, replace ananas with water", "The standard tray now uses water instead of ananas")."""
    recipe: list[str] = []
    known = {t.lower(): t for t in things}
    for rule in rules:
        if not _DEFINES_DEFAULT.search(rule) or not (named := _named(rule, things)):
            continue
        edits = [(m["old"].lower(), m["new"].lower()) for m in [*_INSTEAD.finditer(rule), *_REPLACE.finditer(rule)]
                 if m["old"].lower() in known and m["new"].lower() in known]
        if not edits:
            recipe = named
            continue
        for old, new in edits:
            recipe = [known[new] if t.lower() == old else t for t in recipe]
        recipe = list(dict.fromkeys(recipe))
    return recipe


def read_recipe(request: str, rules: Sequence[str], things: Sequence[str]) -> list[str] | None:
    """The exact set of things a request wants together ("a tray containing chicken, fish, and juice";
    "the default recipe with banana instead of apple" + rule "The default tray recipe is pasta and
    apple"; a later "use water instead of juice" appended to the request replaces juice)."""
    # Swaps and removals apply in the order said, each to the recipe as it stands: "the default recipe
    # with apple instead of fish", then "use fish instead of banana" puts fish back (MAGMA-GEN packaging
    # MainDefinition@505, a longer episode).
    edits = sorted([*_INSTEAD.finditer(request), *_REPLACE.finditer(request), *_WITHOUT.finditer(request)],
                   key=lambda m: m.start())
    outside = request
    for m in edits:  # what the edits name is not what the request lists
        outside = outside[:m.start()] + " " * (m.end() - m.start()) + outside[m.end():]
    named = _named(outside, things)
    # "Hello, I would like a tray." (then "use juice instead of water for this tray"): a request that
    # names nothing but its swaps wants the default recipe as much as one that says "default".
    base = default_recipe(rules, things) if _REFERS.search(request) or not named else []
    items = list(dict.fromkeys([*base, *named]))
    known = {t.lower(): t for t in things}
    for m in edits:
        old = next((i for i, t in enumerate(items) if t.lower() == m["old"].lower()), None)
        new = known.get(m["new"].lower()) if "new" in m.groupdict() else None
        if old is not None:
            del items[old]
        if new is not None and new not in items:
            items.insert(len(items) if old is None else old, new)
    return items or None


_PAIR = r"(?P<a>[A-Za-z][\w-]*)\s+and\s+(?P<b>[A-Za-z][\w-]*)"
# The ways MAGMA's packaging rules keep two foods off one tray (its IncompatibleFoodsRuleRequest and
# rule_renderer): "Do not place apple and juice on the same tray.", "A tray must never contain both
# chicken and pasta.", "... a rule forbidding milk and fish together.", "... now milk and fish cannot
# share a tray.", "pasta and apple must not be placed on the same tray."
_APART = (
    re.compile(rf"\b(?:do\s+not|don't|never)\s+(?:place|put)\s+{_PAIR}\s+(?:on|in)\s+the\s+same\b", re.I),
    re.compile(rf"\bnever\s+contains?\s+both\s+{_PAIR}", re.I),
    re.compile(rf"\bforbidding\s+{_PAIR}\s+together\b", re.I),
    re.compile(rf"\b{_PAIR}\s+(?:cannot|can't|must\s+not|may\s+not|should\s+not)\s+"
               rf"(?:share\b|be\s+(?:placed|put)\s+(?:on|in)\s+the\s+same\b)", re.I),
)


def kept_apart(rules: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs of things the rules keep off one tray, as the rules stand: a rule that replaces one
    ("Replace the rule forbidding chicken and fish together with a rule forbidding milk and fish
    together") drops the first pair it names and adds the last."""
    pairs: dict[frozenset[str], tuple[str, str]] = {}  # keyed by the pair's words, whatever their case or order
    for rule in rules:
        found = [(m["a"], m["b"]) for _, m in sorted((m.start(), m) for pattern in _APART
                                                      for m in pattern.finditer(rule))]
        if len(found) >= 2 and re.search(r"\breplace", rule, re.I):
            pairs.pop(frozenset(w.lower() for w in found[0]), None)
            found = found[-1:]
        for pair in found:
            pairs.setdefault(frozenset(w.lower() for w in pair), pair)
    return list(pairs.values())


def tray_clash(request: str, rules: Sequence[str], things: Sequence[str]) -> tuple[str, str] | None:
    """The pair of things the rules keep apart that the recipe `request` asks for together."""
    pairs = kept_apart(rules)
    if not pairs:
        return None
    known = list(dict.fromkeys([*things, *(w for pair in pairs for w in pair)]))
    recipe = {t.lower() for t in read_recipe(request, rules, known) or []}
    return next((pair for pair in pairs if {w.lower() for w in pair} <= recipe), None)


def after_refused_tray(refused: str, message: str) -> str | None:
    """The request a swap answers after a recipe was refused ("Prepare a tray based on chicken and
    fish, but replace fish with pasta." refused, then "Okay, replace fish with juice instead."): the
    refused request without its own swaps, then the new one. None when the message stands on its own
    (it names the default recipe, or swaps nothing)."""
    swaps = [*_INSTEAD.finditer(message), *_REPLACE.finditer(message)]
    if not swaps or _REFERS.search(message):
        return None
    base = _REPLACE.sub("", _INSTEAD.sub("", refused))
    base = re.sub(r"[,;]?\s*\b(?:but|and|then|use)\s*(?=[.!?]|$)", "", base)  # the ", but" the swap left
    return f"{base.strip()} {message.strip()}"


def read_goal(request: str, rules: Sequence[str], places: Iterable[str],
              scene: Mapping[str, Sequence[str]] | None = None, held: str | None = None) -> Goal | None:
    places = list(places)
    moves = []
    for match in _MOVE.finditer(request):
        target = place_named(match["target"], places)
        source = place_named(match["source"], places)
        if target is None or source is None:
            return None  # a move we cannot place: the model decides
        moves += [Move(frozenset(words(match["what"])), source, target)] * number(match["count"])
    if moves:
        return Goal(moves=moves)
    if (phrase := cleared(request)) is not None and (place := place_named(phrase, places)) is not None:
        # What the rules count out to serve ("put 1 bowl, 1 orange and 2 goblets on it") is cleared like
        # the rest: only what they use stays (MAGMA-GEN table_cleaning SimpleDefinition@500, a longer episode).
        served = {w for rule in rules for m in _ITEM.finditer(rule) for w in words(m["what"])}
        return Goal(clear=place, spare=frozenset(words(" ".join(rules)) - served))
    if scene is not None and not _SORT.search(request) and _COMPOSE.search(request):
        things = [t for ts in scene.values() for t in ts] + ([held] if held else [])
        fill = [p for p in places if p.lower() != "table" and (words(p) & words(" ".join([request, *rules])))]
        items = read_recipe(request, rules, things)
        if len(fill) == 1 and items:
            return Goal(fill=fill[0], items=items)
    if not _SORT.search(request) or _CONTRARY.search(request):
        return None
    goal = Goal(sort=True)
    for match in _KEEP.finditer(request):
        target = place_named(match["target"], places)
        if target is None:
            return None
        goal.keep.append((number(match["count"]), frozenset(words(match["what"])), target))
    for rule in rules:
        match = _FIRST.search(rule)
        if match and not _FORGET.search(rule):
            goal.first = frozenset(words(match["what"]))
        elif _FORGET.search(rule) and goal.first and goal.first <= words(rule):
            goal.first = None  # "Forget about always sorting blue cubes first."
    return goal


def cleared(request: str) -> str | None:
    """The place a request asks to empty ("Remove all objects from the table" -> "table")."""
    match = _CLEAR.search(request)
    if match is None or not re.search(r"\b(?:from|off)\b|\bclear\b|\bempty\b|^clean\b", match.group(0),
                                      re.IGNORECASE):
        return None
    return match["place"]


def _restocked(gone: str, back: set[str]) -> bool:
    """Whether what a restock named covers a thing said gone by the words that tell it apart: "white
    coffee" is back with "We have white capsules again now." (what comes last names the kind of thing)."""
    ordered = [w for token in re.findall(r"[A-Za-z][\w-]*", gone) for w in sorted(words(token))
               if w not in _NOT_THE_THING and w not in _UNITS]
    return len(ordered) > 1 and set(ordered[:-1]) <= back


def unavailable(rules: Sequence[str], request: str) -> str | None:
    """A rule saying that something the request needs is gone ("There is no black coffee anymore",
    "We are out of white capsules until further notice"), unless a later one says it is back."""
    # "Use black coffee instead of milky." does not need the milky (MAGMA-GEN make_coffee SimpleDefinition@705).
    wanted = words(INSTEAD_OF.sub("", request))
    back: set[str] = set()  # words of what later rules said is available again
    for rule in reversed(rules):
        if _BACK.search(rule):
            back |= words(rule) - _NOT_THE_THING - _UNITS
            continue
        for match in (_GONE.search(rule), *_GONE_AFTER.finditer(rule)):
            parts = re.split(r",|\band\b|\bor\b", match["what"]) if match else []
            for part in parts:
                gone = words(part) - _NOT_THE_THING
                gone = gone - _UNITS or gone  # "white capsules": white
                if gone and gone <= wanted and not gone <= back and not _restocked(part, back):
                    return rule
    return None


def stem(name: str) -> str:
    """The type of a numbered object: goblet_2 -> goblet."""
    return re.sub(r"[_\-]?\d+$", "", name)


def sibling_home(thing: str, scene: Mapping[str, Sequence[str]], exclude: Iterable[str] = ()) -> str | None:
    """The one place (outside `exclude`) already holding another object of the same type."""
    homes = {p for p, things in scene.items() if p not in exclude
             and any(t != thing and stem(t) == stem(thing) for t in things)}
    return homes.pop() if len(homes) == 1 else None


_ROUTE = re.compile(r"\b(?:put|place|send|move|store)\s+(?P<state>\w+)\s+(?P<cls>\w+)\s+(?:in|into|on|to)\s+(?:the\s+)?"
                    r"(?P<place>[A-Za-z][\w-]*)", re.IGNORECASE)


def routes(rules: Sequence[str]) -> dict[tuple[str, str], str]:
    """(state, class) -> place from rules like "Put dirty food in trashcan and clean food in food_storage"."""
    table: dict[tuple[str, str], str] = {}
    for rule in rules:
        for part in re.split(r"\band\b|[;,]", rule):
            if (m := _ROUTE.search(part if re.match(r"\s*(?:put|place|send|move|store)\b", part, re.I)
                                   else "put " + part.strip())):
                table[(m["state"].lower(), m["cls"].lower())] = m["place"]
    return table


def routed(thing: str, condition: str | None, scene: Mapping[str, Sequence[str]], rules: Sequence[str],
           exclude: Iterable[str] = (), cls: str | None = None) -> str | None:
    """Where a held object goes: its sibling home, unless an inspection said it is in another state and
    a rule routes that state of its class elsewhere (the class is the one whose clean place is home).
    Without a sibling, `cls` (its class, when known) and the rules say it ("clean dishware in
    dish_storage"); an object not inspected counts as clean."""
    home = sibling_home(thing, scene, exclude)
    if home is None and cls is not None:
        place = routes(rules).get((condition or "clean", cls))
        return place if place not in set(exclude) else None
    if condition is None or home is None:
        return home
    table = routes(rules)
    classes = [c for (state, c), place in table.items() if place == home]
    for cls in classes:
        if (condition, cls) in table:
            return table[(condition, cls)]
    return home


def class_examples(scene: Mapping[str, Sequence[str]], rules: Sequence[str], classes: Sequence[str],
                   per_class: int = 2) -> list[tuple[str, str]]:
    """Object types whose class the scene shows: what lies where a rule sends a class ("clean food in
    food_storage": the mango there is food). As many of each class when every class shows some (at
    most `per_class`), alternating in the classes' order: a small model continues a lopsided list
    with its majority class."""
    by_class: dict[str, list[str]] = {cls: [] for cls in classes}
    for (_, cls), place in routes(rules).items():
        if cls not in by_class:
            continue
        for thing in scene.get(place, []):
            kind = stem(thing)
            known = by_class[cls]
            if kind not in known and len(known) < per_class:
                known.append(kind)
    if all(by_class.values()):
        per_class = min(len(kinds) for kinds in by_class.values())
    examples = []
    for index in range(per_class):
        examples += [(kinds[index], cls) for cls, kinds in by_class.items() if index < len(kinds)]
    return examples


_NOT_USED = re.compile(r"\b(?:must|should|can|do|does|will)\s*(?:not|n't)\s+(?:be\s+)?"
                       r"(?:used|moved|sent|sorted|touched)\b|\bno longer\b|\banymore\b|\bnot available\b",
                       re.IGNORECASE)
_CLAUSE = re.compile(r"[.;!?]+|,\s*|\bthen\b", re.IGNORECASE)
_ALL = re.compile(r"\b(?:all|every|each)\s+(?:the\s+|of\s+the\s+)?(?:objects?|items?|packages?|parts?)\b",
                  re.IGNORECASE)
_MEMORY = re.compile(r"\b(?:memory|remember|assigned|assignments?|defaults?|usual|cycles?)\b", re.IGNORECASE)


# "the target area for ref_obj_2 has changed! It's area3 now": the object in one clause, its area in the next.
_ABOUT_AREA = re.compile(r"\b(?:target|area|destination|assignment|location)s?\b", re.IGNORECASE)
# "area2 is for the rest", "every other object goes to area4" (not "every other category").
_REST = re.compile(r"\bthe\s+rest\b|\bother\s+(?:objects?|items?|ones)\b", re.IGNORECASE)
_PRONOUN = re.compile(r"\b(?:it|it's|its|they|they're|now)\b", re.IGNORECASE)


_CYCLE_FOR = re.compile(r"\bcycle\s+for\b", re.IGNORECASE)
# MAGMA-GEN's interruption requests ("Launch a sorting cycle for ref_obj_1 and ref_obj_2 to area1.", "launch
# a priority cycle for ...") give an area only to the objects leaving their default (ws_interruption's
# _cycle_description): there an area always binds to the object just before it.
_PER_OBJECT_CYCLE = re.compile(r"\b(?:sorting|priority)\s+cycle\s+for\b", re.IGNORECASE)
_SENDING_ALL = re.compile(r"\b(?:send|sending|move|moving|put|putting|bring|bringing)\b", re.IGNORECASE)


def _named_after_an_area(clause: str, named: Sequence[str], places: Sequence[str]) -> bool:
    lowered = clause.lower()
    first_area = min(m.start() for p in places for m in re.finditer(rf"\b{re.escape(p.lower())}\b", lowered))
    return any(m.start() > first_area for o in named for m in re.finditer(rf"\b{re.escape(o.lower())}\b", lowered))


def read_assignment(text: str, objects: Sequence[str], areas: Sequence[str]) -> dict[str, str | None]:
    """Object -> area as a text states it ("ref_obj_1 goes to area2, ref_obj_2 goes to area3", "send
    ref_obj_3 and ref_obj_1 to area3", "all objects to area2", "consider area1 the default for
    ref_obj_1 and area5 for ref_obj_2 and ref_obj_3", "area4 is for ref_obj_1 and area5 is for the
    rest"); None: the text withdraws the object ("ref_obj_3 must not be used anymore")."""
    out: dict[str, str | None] = {}
    pending: list[str] = []  # objects whose area the next clause may give
    for clause in _CLAUSE.split(text):
        named = _named(clause, objects) or (list(objects) if _ALL.search(clause) else [])
        places = _named(clause, areas)
        if not named:
            if len(places) == 1 and _REST.search(clause):
                out.update({o: places[0] for o in objects if o not in out})  # "area2 is for the rest"
            elif len(places) == 1 and pending and _PRONOUN.search(clause):
                out.update(dict.fromkeys(pending, places[0]))
            pending = []
            continue
        pending = []
        if len(named) > 1 and places and _CYCLE_FOR.search(clause) and not _SENDING_ALL.search(clause) \
                and (_PER_OBJECT_CYCLE.search(clause) or _named_after_an_area(clause, named, places)):
            # MAGMA's "cycle for ref_obj_1 to area2 and ref_obj_3": an area binds to the object just
            # before it, and an object without one keeps its default. (The preset's "I need a cycle for
            # ref_obj_1 and ref_obj_2 to area3" still sends both there; MAGMA-GEN's "Launch a sorting
            # cycle for ref_obj_1 and ref_obj_2 to area1." does not: MAGMA-GEN warehouse_sorting
            # SimpleSortingDefinition@705, @603, longer episodes kept back.)
            out.update({o: m["area"] for o in named if (m := re.search(
                rf"\b{re.escape(o)}\s+to\s+(?:the\s+)?(?P<area>[\w-]+)", clause, re.IGNORECASE))
                and m["area"] in places})
            continue
        if not places and availability(clause) == "withdrawn":
            out.update(dict.fromkeys(named))
        elif not places and _ABOUT_AREA.search(clause):
            pending = named
        elif len(places) == 1:
            out.update(dict.fromkeys(named, places[0]))
        elif len(places) == len(named):
            out.update(zip(named, places, strict=True))
        else:
            out.update(_paired(clause, objects, areas, out))
    return out


def _paired(clause: str, objects: Sequence[str], areas: Sequence[str], known: Mapping[str, str | None]
            ) -> dict[str, str | None]:
    """Areas and objects of one clause paired by its "and" parts: "area1 for ref_obj_1 and area5 for
    ref_obj_2 and ref_obj_3" (area first: a part with objects only joins the part before it),
    "ref_obj_1 and ref_obj_2 go to area1 and ref_obj_3 to area2" (objects first: it joins the part
    after it). "the rest" is every object named nowhere else."""
    parts = []
    for part in re.split(r"\band\b", clause, flags=re.IGNORECASE):
        places = _named(part, areas)
        if len(places) > 1:
            return {}  # two areas with nothing between them to tell their objects apart
        parts.append((_named(part, objects), places[0] if places else None, part))
    area_first = any(place is not None and named
                     and part.lower().find(place.lower()) < part.lower().find(named[0].lower())
                     for named, place, part in parts)
    groups: list[tuple[list[str], str, bool]] = []
    waiting: list[str] = []
    for named, place, part in parts:
        if place is None:
            if area_first and groups:
                groups[-1][0].extend(named)
            else:
                waiting += named
            continue
        groups.append(([*waiting, *named], place, bool(_REST.search(part))))
        waiting = []
    out: dict[str, str | None] = {}
    for named, place, _ in groups:
        out.update(dict.fromkeys(named, place))
    for named, place, rest in groups:
        if rest and not named:
            out.update({o: place for o in objects if o not in out and o not in known})
    return out


# A rule's parts: sentences, a preamble ("Small update to the current rules: ..."), its listed clauses.
_PARTS = re.compile(r"[.;!?:]+|,\s*(?:and\s+)?|"
                    r"\band\b(?=\s+(?:every|all|the\s+other|[\w-]+\s+(?:to|goes|go|are|is)\b))", re.IGNORECASE)
_MEMBER = re.compile(r"\b(?:as|is|are)\s+(?:an?\s+|the\s+|in\s+|part\s+of\s+)?(?:category\s+)?"
                     r"(?P<cat>[A-Za-z][\w\s-]*?)\s*$", re.IGNORECASE)
_CATEGORY_ROUTE = re.compile(r"^\s*(?:by the way\s*|new rule\s*:?\s*|please remember that\s*|remember that\s*)?"
                    r"(?:(?:please\s+)?consider\s+(?:that\s+)?)?(?:all\s+)?(?:the\s+)?(?:category\s+)?"
                    r"(?P<cat>[A-Za-z][\w\s-]*?)\s+(?:objects?\s+)?(?:goes|go|are going|is going|"
                    r"must go|should go|are sent|is sent|belongs?)?\s*(?:to|in|into)\s+(?:the\s+)?[\w-]+\s*$",
                    re.IGNORECASE)
_OTHERS = re.compile(r"\b(?:every|all|any)\s+other\b|\bthe\s+(?:other|rest)\b", re.IGNORECASE)
# "Please update the rules: all categories go to area1": every category, the older routes gone.
_EVERY_CATEGORY = re.compile(r"\b(?:all|every|each)\s+(?:the\s+)?(?:categor(?:y|ies)|groups?)\b", re.IGNORECASE)

def _category(phrase: str) -> frozenset[str]:
    """A category's words ("Group B" -> {group, b}; "drinks" -> {drink}; "Type 98" -> {type, 98}), without
    the generic ones. Numbers stay: they are all that tells "Type 98" from "Type 05"."""
    found = frozenset(w for w in re.findall(r"[a-z0-9]+", phrase.lower()))
    plain = frozenset(words(phrase)) | frozenset(w for w in found if len(w) == 1 or w.isdigit())
    return plain - {"category", "object", "every", "other", "all", "the", "from", "now", "on"} or plain


def read_categories(rules: Sequence[str], objects: Sequence[str], areas: Sequence[str]
                    ) -> tuple[dict[str, frozenset[str]], dict[frozenset[str], str], str | None]:
    """Categories the rules give objects ("consider ref_obj_1 and ref_obj_3 as drinks", "ref_obj_1 is
    Mechanical Group, and every other object is Group B", "all objects are Fragile"), the area each
    category goes to ("drinks are going to area2 and food to area5", "Group B goes to area3"), and
    the area of every other category ("every other category goes to area4"). Later rules win."""
    member: dict[str, frozenset[str]] = {}
    routes: dict[frozenset[str], str] = {}
    others: str | None = None

    def known() -> set[frozenset[str]]:
        return set(member.values()) | set(routes)

    for rule in rules:
        if (gone := removed_areas(rule)) is not None:  # the routes there end (_rule_areas)
            routes = {cat: area for cat, area in routes.items() if area.lower() not in gone}
            others = None if others is not None and others.lower() in gone else others
            continue
        this_rule: set[frozenset[str]] = set()
        rest_named = False  # the rule says itself where the other categories go
        named_here: set[str] = set()  # "ref_obj_3 is Rare, and every other object is B": B is all but these
        # MAGMA's plural forms: "ref_obj_1 and ref_obj_2 are Fragile", "Fragile, Product A, and Rare go to
        # area3": the subjects before the one the verb follows, split off by the parts' own separators.
        subjects: list[str] = []
        categories: list[frozenset[str]] = []
        for part in _PARTS.split(rule):
            if not part.strip():
                continue
            named, places = _named(part, objects), _named(part, areas)
            if len(places) == 1 and not named:
                if _EVERY_CATEGORY.search(part):
                    others, routes, rest_named = places[0], {}, True
                elif _OTHERS.search(part):
                    # "... and every other category goes to area4" replaces the older routes.
                    others, rest_named = places[0], True
                    routes = {cat: area for cat, area in routes.items() if cat in this_rule}
                elif (route := _CATEGORY_ROUTE.match(part)) is not None and not _ALL.search(part):
                    # "all objects go to area4" sends every object there (read_assignment): not a category
                    for cat in [*categories, *_route_categories(route["cat"], known())]:
                        routes[cat] = places[0]
                        this_rule.add(cat)
                subjects, categories = [], []
                continue
            if not places and named and not _MEMBER.search(part) and not _without(part, named).strip():
                subjects += named  # "ref_obj_1" of "ref_obj_1 and ref_obj_2 are Fragile"
                continue
            if not places and not named and (cat := _category(part)) in known():
                categories.append(cat)  # "Fragile" of "Fragile, Product A, and Rare go to area3"
                continue
            if places or (match := _MEMBER.search(part)) is None or not (cat := _category(match["cat"])):
                subjects, categories = [], []
                continue
            named, subjects, categories = [*subjects, *named], [], []
            if named:
                member.update(dict.fromkeys(named, cat))
                named_here.update(named)
            elif _ALL.search(part):
                member = dict.fromkeys(objects, cat)
            elif _OTHERS.search(part):
                # MAGMA's "one vs the rest" assignment: every object this rule does not name, whatever
                # an older rule said of it.
                member.update({o: cat for o in objects if o not in named_here})
        of_objects, targets = set(member.values()), {routes[cat] for cat in this_rule}
        if of_objects and this_rule >= of_objects and not rest_named and len(targets) == 1:
            # MAGMA's GiveCategoryAssignmentRequest: a rule that sends every category the objects have
            # to one area makes it the default of every category, named later ones too (its
            # RelationDefaultConstraint): "Dangerous Category goes to area5", said while ref_obj_2's
            # was the only one, sends a later Category 2 there as well.
            others, routes = targets.pop(), {cat: routes[cat] for cat in this_rule}
    return member, routes, others


def _without(text: str, names: Sequence[str]) -> str:
    for name in names:
        text = re.sub(rf"\b{re.escape(name)}\b", " ", text, flags=re.IGNORECASE)
    return text


def _route_categories(phrase: str, known: set[frozenset[str]]) -> list[frozenset[str]]:
    """The categories a route names: "Fragile and Product A" is two when each is known, and one
    ("Food and Drinks") when the whole is known or its pieces are not."""
    whole = _category(phrase)
    pieces = [_category(p) for p in re.split(r"\s*,\s*(?:and\s+)?|\s+and\s+", phrase) if p.strip()]
    if len(pieces) > 1 and whole not in known and all(p in known for p in pieces):
        return pieces
    return [whole] if whole else []


def _categories_asked(request: str, categories: Iterable[frozenset[str]]) -> list[frozenset[str]]:
    """The categories a request names, in order ("a cycle for drinks and right after for food")."""
    said = [w for w in re.findall(r"[a-z0-9]+", request.lower())]
    said_words = [next(iter(words(w)), w) for w in said]
    found = []
    for cat in categories:
        spots = [i for i, w in enumerate(said_words) if w in cat or said[i] in cat]
        if spots and all(any(w in (said_words[i], said[i]) for i in spots) for w in cat):
            found.append((spots[0], cat))
    return [cat for _, cat in sorted(found, key=lambda x: x[0])]


# "do not manipulate yet ref_obj_1", "do not sort ref_obj_2 until I say otherwise", "ref_obj_1 cannot be
# used in sorting cycles" (MAGMA's ForbidObjectRequest): a pause, not a withdrawal.
_PAUSED = re.compile(r"\b(?:do not|don't|must not|should not|cannot|can't)\s+(?:be\s+)?(?:manipulate|use|sort|move|"
                     r"touch|take|send|handle|grab)\w*\b[^.]*?\b(?:yet|until|for now|for the moment|temporarily|"
                     r"in\s+(?:any\s+)?(?:sorting\s+)?cycles?)\b", re.I)
_RESUMED = re.compile(r"\b(?:can be (?:used|sorted|moved|manipulated|handled) again|(?:is|are) fixed|available again|"
                      r"no longer (?:blocked|paused)|you can (?:use|sort|move|manipulate|handle)\b[^.]*?\bagain)\b",
                      re.I)


def availability(clause: str) -> Literal["paused", "resumed", "withdrawn"] | None:
    """What a clause says of the objects it names: paused until further notice ("do not manipulate
    yet ref_obj_1", "ref_obj_1 cannot be used in sorting cycles"), back in use ("ref_obj_1 can be used
    again now", "ref_obj_1 is no longer blocked"), or out of cycles for good ("ref_obj_3 must not be
    used anymore"). A pause and a resumption are read before a withdrawal, whose words they share."""
    if _PAUSED.search(clause):
        return "paused"
    if _RESUMED.search(clause):
        return "resumed"
    if _NOT_USED.search(clause):
        return "withdrawn"
    return None


# "If an object have no default assignment, send it to area1."
_FALLBACK = re.compile(r"\bno\s+(?:default\s+)?(?:assignment|area)\b[^.]*?\b(?:send|put|move|place)\s+(?:it|them)\s+"
                       r"(?:to|in|into)\s+(?:the\s+)?(?P<area>[\w-]+)", re.I)


# "you should not use area2", "the area2 can not be used anymore", "area3 is in maintenance".
_BANNED = re.compile(r"\b(?:should|must|can|could|do|does|will|wo|may)\s*(?:not|n't)\s+(?:be\s+)?(?:use|used|using)\b|"
                     r"\bin maintenance\b|\bout of (?:order|service)\b|"
                     r"\b(?:is|are) (?:closed|unavailable|not available)\b", re.IGNORECASE)
_UNBANNED = re.compile(r"\bnot in maintenance\b|\bno longer in maintenance\b|\b(?:is|are)\s+(?:fine|ok|okay|"
                       r"available|usable|open|back|working)\b|\bcan be used again\b|\b(?:available|usable) again\b",
                       re.IGNORECASE)
# "For future cycle, only objects that are associated with area1 are concerned".
_SCOPE = re.compile(r"\bonly\s+(?:the\s+)?objects?\s+(?:(?:that|which)\s+)?(?:(?:are|is)\s+)?(?:associated|assigned|"
                    r"linked|related|going)\s+(?:with|to)\s+(?:the\s+)?(?P<area>[\w-]+)", re.IGNORECASE)


def area_news(text: str, areas: Sequence[str]) -> list[str]:
    """The clauses of a text that close or reopen an area ("However, you must not use area2 anymore"):
    they hold beyond the request that says them."""
    return [part.strip() for part in _CLAUSE.split(text)
            if _named(part, areas) and (_BANNED.search(part) or _UNBANNED.search(part))]


# "And consider ref_obj_3 to area1, ref_obj_2 to area4 as new default assignments.": said in a request,
# it holds for the cycles after it.
_NEW_DEFAULT = re.compile(r"\bas\s+(?:the\s+|a\s+|my\s+)?(?:new\s+)?defaults?\b|\bnew\s+defaults?\b", re.IGNORECASE)
_CONSIDER = re.compile(r"\bconsider\b.*", re.IGNORECASE | re.DOTALL)


# "Please remove area2 and area5 from your knowledge base." (MAGMA's RemoveAreas): MAGMA then drops every
# rule given since the start that sends objects there, for good: an object falls back to the area an
# earlier rule gave it, and adding the area back later ("Please add area2 to your known areas") does not
# bring those rules back (TaskState.recompute_from_base skips the outdated ones and keeps no trace of them).
_REMOVED_AREAS = re.compile(r"\bremove\s+(?P<areas>[\w-]+(?:\s*(?:,|\band\b)\s*[\w-]+)*)\s+from\s+(?:your|the)\s+"
                            r"(?:knowledge\s+base|known\s+areas|memory|list)", re.IGNORECASE)


def removed_areas(rule: str) -> set[str] | None:
    """The areas (lower case) a rule removes from the known ones, None when it removes none."""
    removal = _REMOVED_AREAS.search(rule)
    return None if removal is None else {w.lower() for w in re.findall(r"[\w-]+", removal["areas"])}


def removal_news(text: str, areas: Sequence[str]) -> list[str]:
    """The sentences of a request that remove known areas, whole: kept as rules, they mark where the
    assignments to those areas end (`_rule_areas`)."""
    return [sentence.strip() for sentence in re.split(r"[.;!?]+", text)
            if (m := _REMOVED_AREAS.search(sentence)) and _named(m["areas"], areas)]


def default_news(text: str, objects: Sequence[str], areas: Sequence[str]) -> list[str]:
    """The sentences of a request that set default assignments (MAGMA's "And consider ref_obj_3 to
    area1 as new default assignment."), whole, as their commas separate assignments; from their
    "consider" on, when they have one ("remove area3 ... and consider area5 as the default target
    for all objects" keeps only the assignment)."""
    news = []
    for sentence in re.split(r"[.;!?]+", text):
        sentence = (found.group(0) if (found := _CONSIDER.search(sentence)) else sentence).strip()
        if _NEW_DEFAULT.search(sentence) and _named(sentence, areas) and (_named(sentence, objects)
                                                                          or _ALL.search(sentence)):
            news.append(sentence)
    return news


def banned(texts: Sequence[str], areas: Sequence[str]) -> list[str]:
    """Areas the texts, in order, close and do not reopen."""
    out: dict[str, None] = {}
    for text in texts:
        for part in area_news(text, areas):
            if _UNBANNED.search(part):
                for place in _named(part, areas):
                    out.pop(place, None)
            else:
                out.update(dict.fromkeys(_named(part, areas)))
    return list(out)


@dataclass(frozen=True)
class Cycle:
    """What a cycle request asks, read from it and the rules: the objects, in order, and the area of
    each ("" when none is known, None when withdrawn), those paused by a rule, and those whose area
    is closed (object -> area)."""
    wanted: list[str]
    area: dict[str, str | None]
    paused: list[str]
    blocked: dict[str, str] = field(default_factory=dict)

    @property
    def missing(self) -> list[str]:
        return [o for o in self.wanted if self.area.get(o) == ""]


def paused(rules: Sequence[str], request: str, objects: Sequence[str]) -> list[str]:
    """Objects a rule pauses ("do not manipulate yet ref_obj_1") and nothing since resumed ("ref_obj_1
    are fixed", "ref_obj_2 can be used again now"), in the rules or the request itself."""
    out: dict[str, None] = {}
    for text in [*rules, request]:
        for part in _CLAUSE.split(text):
            said = availability(part)
            if said == "paused":
                out.update(dict.fromkeys(_named(part, objects)))
            elif said == "resumed":
                for thing in _named(part, objects):
                    out.pop(thing, None)
    return list(out)


def _rule_areas(rules: Sequence[str], objects: Sequence[str], areas: Sequence[str], *, withdrawals: bool
                ) -> tuple[dict[str, str | None], dict[str, frozenset[str]], dict[frozenset[str], str]]:
    """Object -> area as the rules assign them (later rules winning), then by category for the rest;
    with the categories and their routes. With `withdrawals`, an object a rule withdraws from cycles
    maps to None; without, the withdrawal is skipped and the object keeps its earlier area."""
    given: dict[str, list[str | None]] = {}  # each object's areas, rule after rule
    for rule in rules:
        if (gone := removed_areas(rule)) is not None:
            given = {o: [a for a in said if a is None or a.lower() not in gone] for o, said in given.items()}
            continue
        for o, a in read_assignment(rule, objects, areas).items():
            if withdrawals or a:
                given.setdefault(o, []).append(a)
    assigned = {o: said[-1] for o, said in given.items() if said}
    member, routes, others = read_categories(rules, objects, areas)
    for thing, cat in member.items():
        if thing not in assigned and (area := routes.get(cat, others)) is not None:
            assigned[thing] = area
    return assigned, member, routes


def read_cycle(request: str, rules: Sequence[str], objects: Sequence[str], areas: Sequence[str]) -> Cycle | None:
    """The objects a request sends to areas and where, without a scene (tools that take an object by
    name and put it in an area, and no way to look); None when it names no objects to send."""
    default, member, routes = _rule_areas(rules, objects, areas, withdrawals=True)
    asked = read_assignment(request, objects, areas)
    # "For this cycle, consider that category Product A goes to area3": for this request only.
    _, request_routes, _ = read_categories([request], objects, areas)
    for thing, cat in member.items():
        if thing not in asked and cat in request_routes:
            asked[thing] = request_routes[cat]
    known = set(member.values()) | set(routes)
    implicit = True  # not named one by one: "all objects", a category, "your memory"
    by_category = bool(cats := _categories_asked(request, known)) and not _named(request, objects)
    if by_category:
        wanted = [o for cat in cats for o in objects if member.get(o) == cat]
    elif _ALL.search(request):
        wanted = list(objects)
    elif named := _named(request, objects):
        wanted, implicit = named, False
    elif _MEMORY.search(request):
        wanted = [o for o in objects if default.get(o)]
    else:
        return None
    fallback = next((m["area"] for text in [request, *reversed(rules)] if (m := _FALLBACK.search(text))
                     and m["area"] in areas), "")
    area = {thing: asked[thing] if thing in asked else default.get(thing) or fallback for thing in wanted}
    if implicit and not by_category and any(area.values()):
        # A category with no area is asked about, as MAGMA's CycleByCategoriesRequest does, before any
        # of the cycle: the answer ("For this cycle, consider that category Group C goes to area2")
        # completes it, and its stages count every object of every category named.
        wanted = [o for o in wanted if area[o] != ""]
    scope = next((m["area"] for rule in reversed(rules) if (m := _SCOPE.search(rule)) and m["area"] in areas), None)
    if implicit and scope is not None:
        wanted = [o for o in wanted if area[o] == scope]  # "only objects associated with area1 are concerned"
    closed = banned([*rules, request], areas)
    # "... you must not use area4 anymore. All objects must temporary goes to area4": within one
    # request, the area it sends objects to wins over the one it closes; the closing holds after it.
    sent = {a for a in asked.values() if a} & set(banned([request], areas))
    return Cycle(wanted, area, [o for o in paused(rules, request, objects) if o in wanted],
                 {o: a for o in wanted if (a := area[o]) and a in closed and not (o in asked and a in sent)})


_CATEGORIES_NAMED = re.compile(r"\bcategor(?:y|ies)\s+(?P<names>[A-Za-z0-9][\w-]*(?:(?:\s+|\s*,\s*|\s+and\s+)"
                               r"[A-Z0-9][\w-]*)*)")


def asked_categories(request: str, rules: Sequence[str], objects: Sequence[str], areas: Sequence[str],
                     missing: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The categories a request names ("... from categories Category 1 and Type X4") whose objects
    have no known area, each in the request's words with those objects; [] when it names none."""
    found = _CATEGORIES_NAMED.search(request)
    if found is None:
        return []
    member, _, _ = read_categories(rules, objects, areas)
    names = [n for n in re.split(r"\s*,\s*(?:and\s+)?|\s+and\s+", found["names"]) if n]
    if len(names) == 1:
        return [(names[0], list(missing))]
    out = [(name, [o for o in missing if member.get(o) == _category(name)]) for name in names]
    return [(name, things) for name, things in out if things]


def answered_areas(reply: str, asked_about: Sequence[str], rules: Sequence[str], objects: Sequence[str],
                   areas: Sequence[str]) -> dict[str, str]:
    """The areas a reply gives the objects lava asked about, by name ("For this cycle, ref_obj_3
    goes to area5") or by a category the rules put them in ("category Product A goes to area3")."""
    out = {o: a for o, a in read_assignment(reply, asked_about, areas).items() if a}
    member, _, _ = read_categories(rules, objects, areas)
    _, reply_routes, _ = read_categories([reply], objects, areas)
    for thing in asked_about:
        if thing not in out and (cat := member.get(thing)) is not None and cat in reply_routes:
            out[thing] = reply_routes[cat]
    return out


_UNASSIGNED = re.compile(r"\b(?:no|without|not have any|doesn't have|does not have|don't have|do not have|lacks?)\s+"
                         r"(?:an?\s+|any\s+)?(?:default\s+|known\s+)?(?:assignment|area|destination)", re.I)


# "Do you have another area available?", "Which areas can you use?"
_AREAS_ASKED = re.compile(r"\b(?:another|other|which|what|any)\s+(?:free\s+|available\s+|usable\s+)?areas?\b|"
                          r"\bareas?\s+(?:are\s+)?(?:available|avalaible|free|open|usable)\b", re.IGNORECASE)


_WHICH_AREA = re.compile(r"\bwhere\b|\b(?:which|what)\s+(?:target\s+)?areas?\b|\b(?:associated|assigned)\b", re.I)
_WHICH_OBJECTS = re.compile(r"\b(?:which|what)\s+(?:objects?|items?|products?|ones?)\b|"
                            r"\b(?:associated|assigned)\s+(?:to|with)\b", re.I)


def standing_areas(rules: Sequence[str], objects: Sequence[str], areas: Sequence[str]) -> dict[str, str]:
    """Object -> area as the rules assign them, later rules winning, categories included; an object
    a rule withdraws from cycles keeps its assignment."""
    standing, _, _ = _rule_areas(rules, objects, areas, withdrawals=False)
    return {thing: area for thing, area in standing.items() if area}


def cycle_answer(question: str, rules: Sequence[str], objects: Sequence[str], areas: Sequence[str]) -> str | None:
    """What the rules say, for a question about where objects go ("do you know where ref_obj_1 must
    go?"), which have no area ("do you have an object which do not have any assignment?") or which
    areas are open ("do you have another area available?")."""
    cycle = read_cycle("all objects", rules, objects, areas)
    known = {o: a for o, a in (cycle.area.items() if cycle else ()) if a}
    if _UNASSIGNED.search(question):
        missing = [o for o in objects if o not in known]
        if not missing:
            return "Every object has an assignment."
        return f"{listed(missing)} {'has' if len(missing) == 1 else 'have'} no assignment."
    named = _named(question, objects)
    asked_areas = _named(question, areas)
    if named and not asked_areas and _WHICH_AREA.search(question):
        # "Which areas are associated with ref_obj_3 and ref_obj_1?": the assignment stands even for
        # an object a rule keeps out of cycles for now.
        standing = standing_areas(rules, objects, areas)
        grouped: dict[str, list[str]] = {}
        for thing in named:
            grouped.setdefault(standing.get(thing, ""), []).append(thing)
        where = re.search(r"\bwhere\b", question, re.I) is not None  # "Where must ref_obj_3 go?"
        parts = [f"{listed(things)} " + (("goes" if len(things) == 1 else "go") if where else
                                         ("is" if len(things) == 1 else "are") + " assigned") + f" to {area}"
                 for area, things in grouped.items() if area]
        if "" in grouped:
            parts.append(f"I do not have any assignment for {listed(grouped[''])} yet")
        return ", ".join(parts) + "."
    if not named and len(asked_areas) == 1 and _WHICH_OBJECTS.search(question):
        # "Which objects are associated to area5?"
        standing = standing_areas(rules, objects, areas)
        area = asked_areas[0]
        things = [o for o in objects if standing.get(o) == area]
        if not things:
            return f"No objects are associated to {area}."
        return f"{listed(things)} {'is' if len(things) == 1 else 'are'} assigned to {area}."
    if _AREAS_ASKED.search(question) and not named:
        closed = banned(rules, areas)
        usable = [a for a in areas if a not in closed]
        if not usable:
            return "No, every area is closed for now."
        return f"Yes, I can use {listed(usable)}." + (f" {listed(closed)} must not be used." if closed else "")
    if re.search(r"\bwhere\b", question, re.I) and named:
        return " ".join(f"{o} goes to {known[o]}." if o in known else f"I do not have any assignment for {o} yet."
                        for o in named)
    return None


def assignment_goal(request: str, rules: Sequence[str], objects: Sequence[str], areas: Sequence[str]) -> Goal | None:
    """Unit moves of the objects a cycle request wants to their areas. None when one of them has no
    known area: the model decides (or lava asks, see MagmaPolicy.pick_and_place)."""
    return cycle_goal(read_cycle(request, rules, objects, areas))


def cycle_goal(cycle: Cycle | None) -> Goal | None:
    """A cycle's unit moves; None when it has none, or an object whose area is not known."""
    if cycle is None or cycle.missing:
        return None
    moves = [Move(frozenset(words(thing)), None, area, name=thing) for thing in cycle.wanted
             if (area := cycle.area[thing]) is not None]  # None: withdrawn ("must not be used anymore")
    return Goal(moves=moves) if moves else None


_RECIPE = re.compile(r"^\s*to\s+(?P<verb>[a-z]+)\b[^,]*,(?P<rest>.*)$", re.IGNORECASE)


def _recipe_rule(request: str, rules: Sequence[str]) -> re.Match[str] | None:
    asked = words(request)
    return next((m for rule in rules if (m := _RECIPE.match(rule)) and m["verb"].lower() in asked), None)


def _steps_of(m: re.Match[str] | None) -> list[str]:
    return [c.strip() for c in re.split(r",|;|\bthen\b", m["rest"]) if c.strip()] if m else []


def recipe(request: str, rules: Sequence[str]) -> list[str]:
    """The ordered clauses of a rule saying how to do what the request asks ("To wipe the table, first
    clear it, take the sponge, use wipe, then put the sponge back on the table" for "Now wipe the table")."""
    return _steps_of(_recipe_rule(request, rules))


_EMPTYING = re.compile(r"\b(?:clear|empty)\b", re.IGNORECASE)


def recipe_clearing(request: str, rules: Sequence[str], scene: Mapping[str, Sequence[str]],
                    held: str | None) -> Goal | None:
    """The clearing a recipe asks for before its own steps ("To wipe the table, first clear it, ..."
    for "Clean and wipe the table."), while the place (the one it names, else the one its head names)
    still holds something, or something from there is held. What the recipe itself uses (the sponge)
    stays, and does not count."""
    m = _recipe_rule(request, rules)
    clause = next((c for c in _steps_of(m) if _EMPTYING.search(c)), None)
    if m is None or clause is None:
        return None
    named = [p for p in scene if words(p) <= words(clause)] or \
        [p for p in scene if words(p) <= words(m.string[:m.start("rest")])]
    if len(named) != 1:
        return None
    spare = frozenset(words(m.string))
    left = [*scene.get(named[0], []), *([held] if held else [])]
    return Goal(clear=named[0], spare=spare) if any(not words(stem(t)) & spare for t in left) else None


_ITEM = re.compile(rf"\b(?P<count>{STATED})\s+(?P<what>[a-z]+)\b", re.IGNORECASE)
_ADD = re.compile(r"\b(?:set|put|place|add|adding|bring|serve|complete)\b", re.IGNORECASE)


def additions(request: str, places: Iterable[str]) -> tuple[str, list[tuple[int, str]]] | None:
    """("table", [(1, "apple"), (1, "plate")]) for "Set 1 apple, 1 plate on the table please"."""
    if not _ADD.search(request):
        return None
    asked = words(request)
    named = list(dict.fromkeys(p for p in places if words(p) and words(p) <= asked))
    items = [(number(m["count"]), next(iter(words(m["what"])), m["what"])) for m in _ITEM.finditer(request)]
    return (named[0], items) if len(named) == 1 and items else None


_WHEN_ASKED = re.compile(r"\bwhen(?:ever)?\s+(?:i|we|you)\s+(?:ask|tell|say|request)\b", re.IGNORECASE)


def standing_additions(request: str, rules: Sequence[str], places: Iterable[str]
                       ) -> tuple[str, list[tuple[int, str]]] | None:
    """`additions` of the request, else of the latest rule that says what such a request means:
    "Set the table." after "From now on, when I ask you to set the table, put 1 banana and 1 apple on it"."""
    places = list(places)
    found = additions(request, places)
    if found is not None or not _ADD.search(request):
        return found
    asked = words(request)
    for rule in reversed(rules):
        if (_WHEN_ASKED.search(rule) and asked <= words(rule) and (ruled := additions(rule, places)) is not None
                and words(ruled[0]) <= asked):
            return ruled
    return None


def _matches(what: frozenset[str], thing: str) -> bool:
    return bool(what) and what <= words(thing)


def home(thing: str, places: Iterable[str]) -> str | None:
    """The one place that shares a distinctive word with the thing's name, if any."""
    own = words(thing)
    fitting = [p for p in places if p != thing and own & words(p)]
    return fitting[0] if len(fitting) == 1 else None


def targets(goal: Goal, scene: Mapping[str, Sequence[str]], held: str | None) -> dict[str, str]:
    """Where each object should end up for a sorting goal (objects without a home stay put)."""
    things = [t for ts in scene.values() for t in ts] + ([held] if held else [])
    wanted = {t: home_ for t in things if (home_ := home(t, scene)) is not None}
    for count, what, place in goal.keep:
        fitting = [t for t in things if _matches(what, t)]
        # Those already there first (leaving them costs nothing), then the one in hand (the choice
        # must not change once it is taken), then those that must move anyway (blue_cube_4 in the
        # green tray): one that already sits in its own tray would cost a move that gains nothing.
        fitting.sort(key=lambda t: 0 if where(scene, t) == place else 1 if t == held
                     else 3 if where(scene, t) == wanted.get(t) else 2)
        for thing in fitting[:count]:
            wanted[thing] = place
    return wanted


@dataclass(frozen=True, slots=True)
class Step:
    """The next thing to do: take an object, put the held one somewhere, or nothing left."""
    action: str  # "take" | "put" | "finish" | "done"
    value: str | None = None


def next_step(goal: Goal, scene: Mapping[str, Sequence[str]], held: str | None, puts_done: int,
              moved: set[str], ungraspable: Collection[str] = ()) -> Step | None:
    """The next step toward the goal, or None when the scene cannot serve it (observe or ask the
    model). `puts_done` counts the puts made for this request, `moved` the objects taken for it.
    Objects in `ungraspable` are taken last: whatever else the goal needs goes first."""

    def graspable_first(things: Sequence[str]) -> list[str]:
        return sorted(things, key=lambda t: t in ungraspable)

    if goal.moves:
        if puts_done >= len(goal.moves):
            return Step("put", goal.moves[puts_done - 1].target) if held else Step("done")
        move = goal.moves[puts_done]
        if held:
            return Step("put", move.target)
        if move.name is not None:
            return Step("take", move.name)
        fitting = [t for t in scene.get(move.source or "", []) if _matches(move.what, t) and t not in moved]
        fitting = fitting or [t for t in scene.get(move.source or "", []) if _matches(move.what, t)]
        return Step("take", graspable_first(fitting)[0]) if fitting else None
    if goal.fill is not None:
        if held:
            table = next((p for p in scene if "table" in words(p)), None)
            return Step("put", goal.fill if held in goal.items else table)
        there = scene.get(goal.fill, [])
        extra = [t for t in there if t not in goal.items]
        if extra:
            return Step("take", extra[0])  # exactly these: what does not belong goes back
        # The last named first: MAGMA's swaps on a tray being made ("Actually, replace fish with water
        # on this tray.", once one food is on it) replace the first named, and its budget then leaves
        # no room to take that one off the tray again.
        missing = graspable_first([t for t in reversed(goal.items) if t not in there])
        return Step("take", missing[0]) if missing else Step("finish")
    if goal.clear is not None:
        if held:
            return Step("put", sibling_home(held, scene, exclude=(goal.clear,)))
        # What has a known home elsewhere (a same-type sibling is stored there) leaves; once such
        # objects were put away, what has no home is not what the request meant ("remove all objects"
        # leaves the sponge: MAGMA counts serving objects). With no home known at all, the model chooses.
        left = scene.get(goal.clear, [])
        homed = graspable_first([t for t in left if sibling_home(t, scene, exclude=(goal.clear,)) is not None])
        if homed:
            return Step("take", homed[0])
        # Without a sibling to follow, the model chooses where it goes; what a rule names as a tool
        # ("take the sponge, use wipe") is not what clearing means, unless nothing else is there.
        others = graspable_first([t for t in left if not (words(stem(t)) & goal.spare)])
        if others:
            return Step("take", others[0])
        return Step("take", left[0]) if left and not puts_done else Step("done")
    wanted = targets(goal, scene, held)
    if held:
        return Step("put", wanted[held]) if held in wanted else None
    misplaced = graspable_first([t for ts in scene.values() for t in ts
                                 if t in wanted and where(scene, t) != wanted[t]])
    if goal.first:
        misplaced.sort(key=lambda t: not _matches(goal.first or frozenset(), t))
    return Step("take", misplaced[0]) if misplaced else Step("done")


__all__ = [
    "INSTEAD_OF",
    "NUMBER",
    "NUMBER_WORDS",
    "STATED",
    "Cycle",
    "Goal",
    "Move",
    "Step",
    "additions",
    "after_refused_tray",
    "answered_areas",
    "area_news",
    "asked_categories",
    "assignment_goal",
    "availability",
    "banned",
    "class_examples",
    "cleared",
    "cycle_answer",
    "cycle_goal",
    "default_news",
    "home",
    "kept_apart",
    "listed",
    "next_step",
    "number",
    "place_named",
    "read_assignment",
    "read_categories",
    "read_cycle",
    "read_goal",
    "recipe",
    "recipe_clearing",
    "routed",
    "routes",
    "sibling_home",
    "standing_additions",
    "stem",
    "targets",
    "tray_clash",
    "unavailable",
    "words",
]
