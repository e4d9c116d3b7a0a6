"""A poll (voting tally) as a Wasmraft state machine, in Python.

Commands (UTF-8 text, words separated by spaces):
  open POLL OPTION OPTION...   start a poll with two or more options
  vote POLL VOTER OPTION       one vote per voter and poll
  close POLL                   no more votes; answers the final tally
Queries:
  POLL                         "open" or "closed", then one "OPTION COUNT" line per option

All state lives in the host store; module globals would be lost whenever the
host replaces the instance, so there are none.
"""

import json

import wit_world
from componentize_py_types import Err, Ok
from wit_world.imports import store
from wit_world.imports.types import (
    Applied,
    ApplyError_Invalid,
    ApplyError_Rejected,
    Entry,
    Event,
    PluginInfo,
    QueryError_Invalid,
    QueryError_Rejected,
)

MAX_NAME = 64


class Invalid(Exception):
    pass


class Rejected(Exception):
    pass


def name(word: str, what: str) -> str:
    # Names become parts of store keys: keep "/" and oddities out.
    if not (0 < len(word) <= MAX_NAME) or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in word):
        raise Invalid(f"bad {what} {word!r}: use 1-{MAX_NAME} of A-Z a-z 0-9 - _ .")
    return word


def poll_key(poll: str) -> bytes:
    return f"poll/{poll}".encode()


def load(poll: str) -> dict:
    raw = store.get(poll_key(poll))
    if raw is None:
        raise Rejected(f"no poll {poll}")
    return json.loads(raw)


def save(poll: str, state: dict) -> None:
    # A list of [option, count] pairs keeps the options in their given order.
    store.put(poll_key(poll), json.dumps(state, separators=(",", ":")).encode())


def tally(state: dict) -> str:
    lines = ["closed" if state["closed"] else "open"]
    lines += [f"{option} {count}" for option, count in state["counts"]]
    return "\n".join(lines)


def apply_one(entry: Entry) -> Applied:
    try:
        words = entry.command.decode("utf-8").split()
    except UnicodeDecodeError:
        raise Invalid("command is not UTF-8")
    if not words:
        raise Invalid("empty command")
    verb, args = words[0], words[1:]
    if verb == "open":
        if len(args) < 3:
            raise Invalid("usage: open POLL OPTION OPTION...")
        poll = name(args[0], "poll")
        options = [name(o, "option") for o in args[1:]]
        if len(set(options)) != len(options):
            raise Invalid("options must differ")
        if store.get(poll_key(poll)) is not None:
            raise Rejected(f"poll {poll} exists")
        state = {"closed": False, "opened_ms": entry.timestamp_ms, "counts": [[o, 0] for o in options]}
        save(poll, state)
        return Applied(response=tally(state).encode(), events=[Event(key=poll_key(poll), payload=b"opened")])
    if verb == "vote":
        if len(args) != 3:
            raise Invalid("usage: vote POLL VOTER OPTION")
        poll, voter, option = name(args[0], "poll"), name(args[1], "voter"), name(args[2], "option")
        state = load(poll)
        if state["closed"]:
            raise Rejected(f"poll {poll} is closed")
        pair = next((p for p in state["counts"] if p[0] == option), None)
        if pair is None:
            raise Rejected(f"poll {poll} has no option {option}")
        voter_key = f"voter/{poll}/{voter}".encode()
        if store.get(voter_key) is not None:
            raise Rejected(f"{voter} already voted in {poll}")
        pair[1] += 1
        store.put(voter_key, option.encode())
        save(poll, state)
        return Applied(response=f"{option} {pair[1]}".encode(), events=[])
    if verb == "close":
        if len(args) != 1:
            raise Invalid("usage: close POLL")
        poll = name(args[0], "poll")
        state = load(poll)
        if state["closed"]:
            raise Rejected(f"poll {poll} is already closed")
        state["closed"] = True
        save(poll, state)
        return Applied(response=tally(state).encode(), events=[Event(key=poll_key(poll), payload=b"closed")])
    raise Invalid(f"unknown command {verb!r}: open, vote or close")


class WitWorld(wit_world.WitWorld):
    def apply(self, entries):
        results = []
        for entry in entries:
            try:
                results.append(Ok(apply_one(entry)))
            except Invalid as e:
                results.append(Err(ApplyError_Invalid(str(e))))
            except Rejected as e:
                results.append(Err(ApplyError_Rejected(str(e))))
        return results

    def query(self, request: bytes) -> bytes:
        try:
            poll = name(request.decode("utf-8").strip(), "poll")
            return tally(load(poll)).encode()
        except (UnicodeDecodeError, Invalid) as e:
            raise Err(QueryError_Invalid(str(e)))
        except Rejected as e:
            raise Err(QueryError_Rejected(str(e)))

    def info(self) -> PluginInfo:
        return PluginInfo(name="python-poll", version="0.1.0", sdk_version="")
