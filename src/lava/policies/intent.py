"""What a user message wants: action, an answer, or only to be heard (a rule, a fact, a preference).

MAGMA stages expect exactly one of these, and answering an informative message with a tool call
(or a request with text) fails the stage. Clear cases are read from the wording; the rest go to
the model as a three-way constrained choice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .task_state import Intent, sentences

_ACT_VERBS = frozenset((
    "press", "push", "toggle", "launch", "start", "run", "sort", "move", "place", "put", "take", "grab", "pick",
    "prepare", "make", "clean", "wipe", "set", "store", "deliver", "balance", "arrange", "process", "bring",
    "send", "perform", "remove", "clear", "load", "unload", "drop", "fill", "wash", "pack", "cook", "serve",
    "transfer", "carry", "fetch", "get", "open", "close", "turn", "insert", "add", "handle", "organize",
    "organise", "tidy", "empty", "discard", "throw", "mark", "label", "validate", "ship", "go", "use", "fix",
    "stack", "swap", "return", "detect", "scan", "inspect", "check", "cancel", "stop", "continue", "finish", "do",
    "complete", "collect", "gather", "assemble", "build", "distribute", "dispatch", "wrap", "seal", "attach",
    "heat", "brew", "pour", "lift", "replace", "hand", "give", "provide", "restock", "refill", "dry", "fold",
    "hang", "separate", "combine", "mix", "lay", "position", "rearrange", "reorder", "shelve", "dispose",
))
_FILLERS = ("ok", "okay", "good", "great", "perfect", "now", "then", "hey", "hello", "hi", "so", "and", "alright",
            "oh", "please", "pls", "kindly", "also", "first", "next", "finally", "just")
_LEADS = ("let's", "lets", "can you", "could you", "would you", "will you", "i want you to", "i need you to",
          "go ahead and", "you can", "you may", "you should", "try to")
_STRONG_INFORM = re.compile(r"\b(remember|do not forget|don't forget|keep in mind|note that|from now on|"
                            r"new (?:\w+ )?rule|forget|each time|every time|whenever|for future|future|from now|"
                            r"wait for (?:further|more|new|next|my|the next) instructions?|do nothing|stand by)\b",
                            re.IGNORECASE)
_WEAK_INFORM = re.compile(r"\b(always|never|must|should|rules?|constraint|default|prefers?|likes?|has access|consider|"
                          r"by the way|(?:are|is) going to|go to|"
                          r"have access|belongs?|goes to|uses|there is no|there are no|anymore|no longer|"
                          r"is broken|out of stock|is empty|(?:has|have) changed|(?:is|are) for)\b",
                          re.IGNORECASE)
_WANT = re.compile(r"\b(would like|'d like|wants? an?|needs? an?|"
                   r"(?:new|another) (recipe|order|delivery|task|request)s?|"
                   r"(?:deliver(?:y|ies)|orders?|tasks?) to (?:prepare|process|handle|do))\b", re.IGNORECASE)
_QUESTION_START = re.compile(
    r"^(who|what|which|where|when|why|how|whose|is there|are there|is it|do you|does|did|have you|has|"
    r"can you tell|could you tell|tell me)\b", re.IGNORECASE)
# A request in the middle of a sentence: "Hello we won't use area2 anymore, you can remove it!"
_EMBEDDED_LEAD = re.compile(r"\b(?:you can|can you|could you|you may|go ahead and|please)\s+([a-z]+)", re.IGNORECASE)
# A message that opens with a prohibition states a rule ("Do not place apple and juice on the same tray").
_PROHIBITION = re.compile(r"^\s*(?:(?:please|however|but|and|also)\s*,?\s*)?(?:do not|don't|never|avoid)\b",
                          re.IGNORECASE)
_CLAUSES = re.compile(r"[.:;!?]+\s*|,\s+")
# A clause that only greets or approves ("Hey!", "Okay,", "Perfect"): it says nothing about the intent.
_GREETING = re.compile(r"^\s*(?:hello|hi|hey|ok|okay|good|great|perfect|alright|oh|so|well|thanks|thank you)"
                       r"(?:\s+(?:robot|machine|there|again))?\s*$", re.IGNORECASE)
# The subject's verb in second or third place makes a statement ("team GEPETTO prefers milky coffee"),
# not an order, unless the first word is a verb itself ("put what is on the table ...").
_STATED = frozenset(("is", "are", "was", "were", "has", "have", "prefers", "likes", "loves", "wants", "needs",
                     "goes", "belongs", "uses", "drinks"))


# "ref_obj_1 and ref_obj_2 are Fragile, ref_obj_3 is Rare" (MAGMA's categories after its bare "Hello, "):
# things named by identifiers, said to be something.
_NAMES_ARE = re.compile(r"^(?:[a-z]+_\w+(?:\s*,\s*(?:and\s+)?|\s+and\s+)?)+\s+(?:is|are)\s+\w", re.IGNORECASE)


# Editing a standing recipe or rule ("Replace the standard tray recipe with ananas and milk") changes
# what later requests mean; nothing is done now.
_EDITS = frozenset(("replace", "change", "update", "swap", "modify", "substitute"))
_STANDING = re.compile(r"\b(?:default|standard|usual)\s+(?:\w+\s+)?(?:recipe|rule|composition|menu)s?\b|"
                       r"\brule\s+(?:forbidding|saying|stating|that|which)\b", re.IGNORECASE)

# What is in stock, gone or back ("We are out of white capsules until further notice.", "You can use
# white coffee again now.", "The white capsules have been restocked."): a fact for later requests.
# Likewise an object allowed again ("ref_obj_1 can be used again now.", "you can manipulate ref_obj_1 again").
_STOCK = re.compile(r"\b(?:we are out of|until further notice|(?:is|are)\s+(?:available|in stock)\s+again|"
                    r"(?:has|have)\s+been\s+restocked|back in stock|(?:can|may)\s+use\b[\w\s-]*\bagain\s+now|"
                    r"we have\b[\w\s-]*\bagain|(?:can|may)\s+be\s+(?:used|sorted|moved|manipulated|handled)\s+again|"
                    r"you\s+(?:can|may)\s+(?:manipulate|handle|sort|move)\b[\w\s-]*\bagain)\b", re.IGNORECASE)

# "Use these rules from now on: ref_obj_2 goes to area5": adopting rules is not acting on them.
_ADOPT = frozenset(("use", "apply", "follow", "adopt", "keep", "consider"))
_RULES_NOUN = re.compile(r"\b(?:rules?|assignments?|defaults?|constraints?|conventions?)\b", re.IGNORECASE)


def _adopts_rules(verb: str, opening: str, text: str) -> bool:
    """"Use these rules from now on: ...", but not "Follow the default rules and launch a cycle"."""
    if verb not in _ADOPT or not (_STRONG_INFORM.search(opening) or _RULES_NOUN.search(opening)):
        return False
    return not _acts_after(text)


def _acts_after(text: str) -> bool:
    """Whether a part after an "and" or a "then" starts with an acting verb."""
    then = [_clause_verb(part) for part in re.split(r"\b(?:and|then)\b", text)[1:]]
    return any(v in _ACT_VERBS and v not in _ADOPT for v in then)


_PLEASE_DO = re.compile(r"^\s*please\s+(?P<verb>[a-z]+)\b", re.IGNORECASE)


def _asks_after(text: str, tool_words: set[str]) -> bool:
    """A later sentence asks for something now ("... Please prepare only the coffee for Lee."): the
    prohibition before it scopes that request rather than stating a rule."""
    later = [s for s in sentences(text)[1:] if not _WEAK_INFORM.search(s)]
    return any((m := _PLEASE_DO.match(s)) and (m["verb"].lower() in _ACT_VERBS or m["verb"].lower() in tool_words)
               for s in later)


def _clause_verb(clause: str) -> str | None:
    words = clause.strip().lower()
    changed = True
    while changed:
        changed = False
        for lead in (*_LEADS, *_FILLERS):
            if words.startswith(lead + " ") or words == lead:
                words = words[len(lead):].lstrip(" ,!")
                changed = True
    if re.match(r"(do(es)? you|do not|don't)\b", words):
        return None  # "do you know ...": a question, not "do"
    match = re.match(r"[a-z]+(?!\w)", words)  # a word: "area2 is for the rest" starts with no verb
    if match is None:
        return None
    if match.group(0) not in _ACT_VERBS and _STATED & set(words.split()[1:3]):
        return None
    return match.group(0)


def _clauses(text: str) -> list[str]:
    text = re.sub(r"\b(\w+)\s+\1\b", r"\1", text)  # "I want you to to launch": a typed-twice word
    return [c for c in _CLAUSES.split(text) if c.strip() and not _GREETING.match(c)]


def heuristic_intent(text: str, tool_names: Sequence[str]) -> Intent | None:
    """The intent when the wording settles it; None when the model should decide."""
    # A tool's name starts with its verb (toggle_button, pick_to_tray): its other words are nouns
    # ("Current storage rules: ..." does not call cancel_current_action).
    tool_words = {verb for name in tool_names if len(verb := name.lower().split("_")[0]) > 2}
    clauses = _clauses(text)
    verbs = [_clause_verb(c) for c in clauses]
    acting = [v for v in verbs if v is not None and (v in _ACT_VERBS or v in tool_words)]
    opening = clauses[0] if clauses else ""
    if acting and set(acting) <= _EDITS and _STANDING.search(text) and not _WANT.search(text):
        return "acknowledge"  # "In the default recipe, replace ananas with water": the rule changes
    if _STOCK.search(text) and not _WANT.search(text) and not (verbs and verbs[0] in acting and verbs[0] != "use"):
        return "acknowledge"
    if (verbs and verbs[0] in acting and verbs[0] not in ("forget", "remember") and not _STRONG_INFORM.match(opening)
            and not _adopts_rules(verbs[0], opening, text)):
        return "act"
    if verbs and verbs[0] in _ADOPT and _acts_after(text):
        return "act"  # "Follow the default rules and launch a cycle for all objects"
    if _PROHIBITION.match(text) and not _STRONG_INFORM.search(text) and _asks_after(text, tool_words):
        return "act"  # "Do not make the coffee for Scott. Please prepare only the coffee for Lee."
    if _STRONG_INFORM.search(text) or _PROHIBITION.match(text):
        return "acknowledge"
    acting += [v for v in (m.group(1).lower() for m in _EMBEDDED_LEAD.finditer(text))
               if v in _ACT_VERBS or v in tool_words]
    if acting or _WANT.search(text):
        return "act"
    stripped = text.strip()
    if _QUESTION_START.match(_strip_greeting(stripped)) or stripped.endswith("?"):
        return "answer"
    if _WEAK_INFORM.search(text) or _NAMES_ARE.match(_strip_greeting(stripped)):
        return "acknowledge"
    if re.search(r"\bplease\b", text, re.IGNORECASE):
        return "act"
    return None


def _strip_greeting(text: str) -> str:
    return re.sub(r"^(hello|hi|hey)(\s+\w+)?[,!.]?\s+", "", text, flags=re.IGNORECASE)


INTENT_SCHEMA = {"type": "object", "properties": {"intent": {"enum": ["act", "answer", "acknowledge"]}},
                 "required": ["intent"], "additionalProperties": False}


__all__ = ["INTENT_SCHEMA", "heuristic_intent"]
