// A leaderboard as a Wasmraft state machine, in JavaScript (QuickJS).
//
// Commands (ASCII text, words separated by spaces):
//   score PLAYER POINTS   records a game; the board keeps each player's best
//   remove PLAYER         takes a player off the board
// Queries:
//   top N                 the N best players, "RANK PLAYER POINTS" per line
//   player PLAYER         that player's best score
//
// Keys: "player/NAME" holds the best score; "rank/SSSSSSSSSS/NAME" (score
// inverted and zero-padded) orders the board, so `top` is one store scan.
// All state lives in the store: the host may replace this instance anytime.

import store from "wasmraft:plugin/store@0.1.0";

const MAX_POINTS = 1_000_000_000;
const NAME = /^[A-Za-z0-9_.-]{1,32}$/;

class Invalid extends Error {}
class Rejected extends Error {}

// Commands are ASCII: no TextDecoder needed, and nothing else is accepted.
function ascii(bytes) {
  let s = "";
  for (const b of bytes) {
    if (b >= 0x80) throw new Invalid("command is not ASCII");
    s += String.fromCharCode(b);
  }
  return s;
}

function bytes(s) {
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

function player(word) {
  if (word === undefined || !NAME.test(word)) throw new Invalid(`bad player name ${JSON.stringify(word ?? "")}`);
  return word;
}

function points(word) {
  if (!/^[0-9]{1,10}$/.test(word ?? "") || Number(word) > MAX_POINTS) {
    throw new Invalid(`points must be an integer from 0 to ${MAX_POINTS}`);
  }
  return Number(word);
}

const playerKey = (name) => bytes(`player/${name}`);
const rankKey = (name, score) => bytes(`rank/${String(MAX_POINTS - score).padStart(10, "0")}/${name}`);

function best(name) {
  const v = store.get(playerKey(name));
  return v === null || v === undefined ? null : Number(ascii(v));
}

function applyOne(entry) {
  const words = ascii(entry.command).split(" ").filter((w) => w !== "");
  switch (words[0]) {
    case "score": {
      if (words.length !== 3) throw new Invalid("usage: score PLAYER POINTS");
      const name = player(words[1]);
      const score = points(words[2]);
      const old = best(name);
      if (old !== null && old >= score) return { response: bytes(`kept ${old}`), events: [] };
      if (old !== null) store.delete(rankKey(name, old));
      store.put(playerKey(name), bytes(String(score)));
      store.put(rankKey(name, score), new Uint8Array(0));
      return { response: bytes(`best ${score}`), events: [{ key: playerKey(name), payload: bytes(String(score)) }] };
    }
    case "remove": {
      if (words.length !== 2) throw new Invalid("usage: remove PLAYER");
      const name = player(words[1]);
      const old = best(name);
      if (old === null) throw new Rejected(`no player ${name}`);
      store.delete(playerKey(name));
      store.delete(rankKey(name, old));
      return { response: bytes("removed"), events: [{ key: playerKey(name), payload: new Uint8Array(0) }] };
    }
    default:
      throw new Invalid(`unknown command ${JSON.stringify(words[0] ?? "")}: score or remove`);
  }
}

export function apply(entries) {
  return entries.map((entry) => {
    try {
      return { tag: "ok", val: applyOne(entry) };
    } catch (e) {
      if (e instanceof Invalid) return { tag: "err", val: { tag: "invalid", val: e.message } };
      if (e instanceof Rejected) return { tag: "err", val: { tag: "rejected", val: e.message } };
      throw e; // a bug: trap, so the host fails just this entry
    }
  });
}

export function query(request) {
  try {
    const words = ascii(request).split(" ").filter((w) => w !== "");
    if (words[0] === "top" && words.length === 2 && /^[1-9][0-9]{0,2}$/.test(words[1])) {
      const rows = store.scan(bytes("rank/"), bytes("rank0"), Number(words[1]), false);
      const lines = rows.map(([key], i) => {
        const [, inverted, name] = ascii(key).split("/");
        return `${i + 1} ${name} ${MAX_POINTS - Number(inverted)}`;
      });
      return bytes(lines.join("\n"));
    }
    if (words[0] === "player" && words.length === 2) {
      const score = best(player(words[1]));
      if (score === null) throw new Rejected(`no player ${words[1]}`);
      return bytes(String(score));
    }
    throw new Invalid("queries: top N (N from 1 to 999), player PLAYER");
  } catch (e) {
    if (e instanceof Invalid) throw { tag: "invalid", val: e.message };
    if (e instanceof Rejected) throw { tag: "rejected", val: e.message };
    throw e;
  }
}

export function info() {
  return { name: "js-leaderboard", version: "0.1.0", sdkVersion: "" };
}
