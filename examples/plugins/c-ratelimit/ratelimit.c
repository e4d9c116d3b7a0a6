// A token-bucket rate limiter as a Wasmraft state machine, in C.
//
// Commands (ASCII text, words separated by single spaces):
//   limit KEY CAPACITY RATE   a bucket of CAPACITY tokens that refills RATE
//                             tokens per second; starts full
//   take KEY N                takes N tokens, or is rejected if fewer are left
//   drop KEY                  removes the bucket
// Queries:
//   KEY [AT_MS]               whole tokens left, as of the last entry that
//                             touched the bucket, or refilled up to AT_MS
//
// The only clock is the entry's timestamp-ms, the same on every replica.
// Tokens are counted in thousandths so that refills stay integer: a bucket
// gains RATE thousandths per millisecond. Bindings: state_machine.h, made by
// `cargo xtask examples` from wit/.

#include <stdlib.h>
#include <string.h>

#include "state_machine.h"

#define MAX_COMMAND 256
#define MAX_WORDS 4
#define MAX_NAME 64
#define MAX_NUMBER 1000000000ULL

typedef struct {
  uint64_t capacity;  // tokens
  uint64_t rate;      // tokens per second = thousandths per millisecond
  uint64_t milli;     // thousandths of a token left
  uint64_t last_ms;   // timestamp of the last refill
} bucket_t;

// Little-endian, fixed size: the stored bytes are the same on every replica.
#define BUCKET_BYTES 32

typedef struct {
  char text[MAX_COMMAND + 1];
  char *words[MAX_WORDS];
  int count;
} words_t;

// Messages are "before" + arg + "after". No printf: wasi-libc's stdio
// would bring WASI imports (fd_write, fd_seek, fd_close) into the module.
static void set_error(state_machine_string_t *out, const char *before, const char *arg, const char *after) {
  char buf[200];
  size_t a = strlen(before), b = strlen(arg), c = strlen(after);
  if (b > MAX_COMMAND) b = MAX_COMMAND;
  if (a + b + c >= sizeof buf) abort();
  memcpy(buf, before, a);
  memcpy(buf + a, arg, b);
  memcpy(buf + a + b, after, c);
  buf[a + b + c] = 0;
  state_machine_string_dup(out, buf);
}

// Writes v in decimal after `prefix` into buf (at least 48 bytes).
static char *format_u64(char *buf, const char *prefix, uint64_t v) {
  char digits[21];
  int n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  size_t p = strlen(prefix);
  memcpy(buf, prefix, p);
  for (int i = 0; i < n; i++) buf[p + i] = digits[n - 1 - i];
  buf[p + n] = 0;
  return buf;
}

// Splits ASCII text on single spaces. Returns an error message or NULL.
static const char *split(const uint8_t *bytes, size_t len, words_t *w) {
  if (len == 0) return "empty command";
  if (len > MAX_COMMAND) return "command too long";
  for (size_t i = 0; i < len; i++) {
    if (bytes[i] < 0x20 || bytes[i] > 0x7e) return "command is not printable ASCII";
  }
  memcpy(w->text, bytes, len);
  w->text[len] = 0;
  w->count = 0;
  for (char *p = w->text; *p;) {
    if (w->count == MAX_WORDS) return "too many words";
    w->words[w->count++] = p;
    char *space = strchr(p, ' ');
    if (!space) break;
    *space = 0;
    p = space + 1;
    if (*p == 0 || *p == ' ') return "words are separated by single spaces";
  }
  return NULL;
}

static int valid_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > MAX_NAME) return 0;
  for (; *s; s++) {
    char c = *s;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!ok) return 0;
  }
  return 1;
}

// Strict decimal up to `max`; returns 0 on anything else.
static int parse_number(const char *s, uint64_t max, uint64_t *out) {
  uint64_t v = 0;
  if (*s == 0 || strlen(s) > 13) return 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return 0;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  if (v > max) return 0;
  *out = v;
  return 1;
}

static state_machine_list_u8_t bucket_key(const char *name, char *buf) {
  size_t n = strlen(name);
  memcpy(buf, "bucket/", 7);
  memcpy(buf + 7, name, n);
  return (state_machine_list_u8_t){(uint8_t *)buf, 7 + n};
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static int load(const char *name, bucket_t *b) {
  char buf[8 + MAX_NAME];
  state_machine_list_u8_t key = bucket_key(name, buf);
  state_machine_list_u8_t value;
  if (!wasmraft_plugin_store_get(&key, &value)) return 0;
  // Only this plugin writes the keyspace; a wrong size is a broken store.
  if (value.len != BUCKET_BYTES) abort();
  b->capacity = get_u64(value.ptr);
  b->rate = get_u64(value.ptr + 8);
  b->milli = get_u64(value.ptr + 16);
  b->last_ms = get_u64(value.ptr + 24);
  state_machine_list_u8_free(&value);
  return 1;
}

static void save(const char *name, const bucket_t *b) {
  char buf[8 + MAX_NAME];
  uint8_t bytes[BUCKET_BYTES];
  put_u64(bytes, b->capacity);
  put_u64(bytes + 8, b->rate);
  put_u64(bytes + 16, b->milli);
  put_u64(bytes + 24, b->last_ms);
  state_machine_list_u8_t key = bucket_key(name, buf);
  state_machine_list_u8_t value = {bytes, BUCKET_BYTES};
  wasmraft_plugin_store_put(&key, &value);
}

// Adds what the bucket gained since its last refill, up to its capacity. A
// timestamp earlier than the last one (a new leader's clock) adds nothing.
static void refill(bucket_t *b, uint64_t now_ms) {
  uint64_t full = b->capacity * 1000;
  if (now_ms > b->last_ms) {
    uint64_t elapsed = now_ms - b->last_ms;
    uint64_t missing = full - b->milli;
    // Compare before multiplying: elapsed * rate can overflow.
    if (b->rate > 0 && elapsed >= (missing + b->rate - 1) / b->rate) {
      b->milli = full;
    } else {
      b->milli += elapsed * b->rate;
    }
    b->last_ms = now_ms;
  }
}

static int respond(state_machine_result_applied_apply_error_t *r, const char *text) {
  r->is_err = false;
  size_t n = strlen(text);
  r->val.ok.response.ptr = malloc(n);
  if (!r->val.ok.response.ptr) abort();
  memcpy(r->val.ok.response.ptr, text, n);
  r->val.ok.response.len = n;
  r->val.ok.events = (wasmraft_plugin_types_list_event_t){NULL, 0};
  return 0;
}

static int invalid(state_machine_result_applied_apply_error_t *r, const char *before, const char *arg, const char *after) {
  r->is_err = true;
  r->val.err.tag = WASMRAFT_PLUGIN_TYPES_APPLY_ERROR_INVALID;
  set_error(&r->val.err.val.invalid, before, arg, after);
  return 0;
}

static int rejected(state_machine_result_applied_apply_error_t *r, const char *before, const char *arg, const char *after) {
  r->is_err = true;
  r->val.err.tag = WASMRAFT_PLUGIN_TYPES_APPLY_ERROR_REJECTED;
  set_error(&r->val.err.val.rejected, before, arg, after);
  return 0;
}

// Returns 0; the outcome goes to *r.
static int apply_one(const state_machine_entry_t *e, state_machine_result_applied_apply_error_t *r) {
  words_t w;
  char text[64];
  const char *problem = split(e->command.ptr, e->command.len, &w);
  if (problem) return invalid(r, problem, "", "");
  const char *verb = w.words[0];
  if (w.count >= 2 && !valid_name(w.words[1])) {
    return invalid(r, "bad key ", w.words[1], ": use 1-64 of A-Z a-z 0-9 - _ .");
  }
  bucket_t b;
  if (strcmp(verb, "limit") == 0) {
    if (w.count != 4) return invalid(r, "usage: limit KEY CAPACITY RATE", "", "");
    if (!parse_number(w.words[2], MAX_NUMBER, &b.capacity) || b.capacity == 0) {
      return invalid(r, "CAPACITY must be a whole number from 1 to 1000000000", "", "");
    }
    if (!parse_number(w.words[3], MAX_NUMBER, &b.rate)) {
      return invalid(r, "RATE must be a whole number from 0 to 1000000000", "", "");
    }
    b.milli = b.capacity * 1000;
    b.last_ms = e->timestamp_ms;
    save(w.words[1], &b);
    return respond(r, format_u64(text, "ok ", b.capacity));
  }
  if (strcmp(verb, "take") == 0) {
    uint64_t n;
    if (w.count != 3) return invalid(r, "usage: take KEY N", "", "");
    if (!parse_number(w.words[2], MAX_NUMBER, &n) || n == 0) {
      return invalid(r, "N must be a whole number from 1 to 1000000000", "", "");
    }
    if (!load(w.words[1], &b)) return rejected(r, "no limit set for ", w.words[1], "");
    refill(&b, e->timestamp_ms);
    // Nothing is written on refusal, not even the refill: a refused entry
    // leaves no trace.
    if (b.milli < n * 1000) return rejected(r, "", w.words[1], " has too few tokens");
    b.milli -= n * 1000;
    save(w.words[1], &b);
    return respond(r, format_u64(text, "ok ", b.milli / 1000));
  }
  if (strcmp(verb, "drop") == 0) {
    char buf[8 + MAX_NAME];
    if (w.count != 2) return invalid(r, "usage: drop KEY", "", "");
    if (!load(w.words[1], &b)) return rejected(r, "no limit set for ", w.words[1], "");
    state_machine_list_u8_t key = bucket_key(w.words[1], buf);
    wasmraft_plugin_store_delete(&key);
    return respond(r, "ok");
  }
  return invalid(r, "unknown command ", verb, ": limit, take or drop");
}

void exports_state_machine_apply(state_machine_list_entry_t *entries, state_machine_list_result_applied_apply_error_t *ret) {
  ret->len = entries->len;
  ret->ptr = calloc(entries->len ? entries->len : 1, sizeof *ret->ptr);
  if (!ret->ptr) abort();
  for (size_t i = 0; i < entries->len; i++) apply_one(&entries->ptr[i], &ret->ptr[i]);
  state_machine_list_entry_free(entries);
}

bool exports_state_machine_query(state_machine_list_u8_t *request, state_machine_list_u8_t *ret, state_machine_query_error_t *err) {
  words_t w;
  bucket_t b;
  uint64_t at = 0;
  bool ok = false;
  const char *problem = split(request->ptr, request->len, &w);
  if (!problem && (w.count > 2 || !valid_name(w.words[0]))) problem = "usage: KEY [AT_MS]";
  if (!problem && w.count == 2 && !parse_number(w.words[1], UINT64_MAX / 10, &at)) problem = "AT_MS must be a whole number";
  if (problem) {
    err->tag = WASMRAFT_PLUGIN_TYPES_QUERY_ERROR_INVALID;
    state_machine_string_dup(&err->val.invalid, problem);
  } else if (!load(w.words[0], &b)) {
    err->tag = WASMRAFT_PLUGIN_TYPES_QUERY_ERROR_REJECTED;
    set_error(&err->val.rejected, "no limit set for ", w.words[0], "");
  } else {
    char text[48];
    if (w.count == 2) refill(&b, at);
    size_t n = strlen(format_u64(text, "", b.milli / 1000));
    ret->ptr = malloc(n);
    if (!ret->ptr) abort();
    memcpy(ret->ptr, text, n);
    ret->len = n;
    ok = true;
  }
  state_machine_list_u8_free(request);
  return ok;
}

void exports_state_machine_info(state_machine_plugin_info_t *ret) {
  state_machine_string_dup(&ret->name, "c-ratelimit");
  state_machine_string_dup(&ret->version, "0.1.0");
  state_machine_string_dup(&ret->sdk_version, "");
}
