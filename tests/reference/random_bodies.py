"""Random request bodies against a live `pagoda serve`: every route, every
field, valid values and wrong ones, some streamed and some dropped midway,
four clients at once. Exits non-zero on the first broken contract.

    python random_bodies.py --base-url http://127.0.0.1:8000 [--count 400] [--seed 1]

The contracts (OpenAI's and the server's own, not read off its output):
- an answer is 200, or 400/413/429 with OpenAI's error object (`message`,
  `type`, `param`, `code`); never a 5xx, never a dropped connection;
- a 200 body is JSON with `n` choices per prompt whose finish reasons are
  OpenAI's, and at most `max_tokens` completion tokens per choice;
- a stream is JSON chunks ending in `data: [DONE]` (or an error chunk);
- an answer of a valid schema, choice or pattern that finished with
  `stop` is what it asked for (`jsonschema`, the choice list, `re`);
- afterwards the server is healthy; the test that runs this stops it and
  checks its audit (no page leaked, nothing left running).
"""

import argparse
import http.client
import json
import random
import re
import sys
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import jsonschema

ERROR_STATUSES = {400, 413, 429}
FINISH = {"stop", "length", "tool_calls"}


def junk(rng):
    """A value of a random JSON type, some of them odd."""
    return rng.choice([
        None, True, False, 0, -1, 1, 2**63, -(2**63) - 1, 1.5, -0.0, 1e300,
        "", "x", "\u0000", "\ud7ff\U0001f600", [], [1, "a"], {}, {"a": {"b": [None]}},
    ])


def sometimes(rng, valid, p=0.8):
    """`valid()` with probability `p`, else junk."""
    return valid() if rng.random() < p else junk(rng)


SCHEMAS = [
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
     "required": ["n"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
    {"type": "string", "maxLength": 6},
    {"type": "boolean"},
    {"enum": [1, "two", None]},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "null"}},
     "required": ["a"]},
]
BAD_SCHEMAS = [
    {"type": "integer", "minimum": 5, "maximum": 1},
    {"type": "wat"},
    {"$ref": "#/nowhere"},
    {"type": "string", "pattern": "("},
    "not a schema",
]
REGEXES = ["[a-c]{1,4}", "(yes|no)", "\\d{2}-\\d{2}", "x*y?"]
BAD_REGEXES = ["(", "a{2,1}", "[z-a]", "\\"]
CHOICES = [["yes", "no"], ["red", "green", "blue"], ["\u00e9t\u00e9", "hiver"]]
GRAMMARS = ['start: "a" | "b" "c"', 'start: x+\nx: "0" | "1"']
BAD_GRAMMARS = ["start: ", "start: undefined_rule", 'start: "a" |']

TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"], "additionalProperties": False}}}


def structured(rng, body):
    """One structured-output field; returns how to check a finished answer."""
    kind = rng.randrange(9)
    if kind == 0:
        body["response_format"] = {"type": "json_object"}
        return ("json", {"type": "object"})
    if kind == 1:
        s = rng.choice(SCHEMAS)
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": s}}
        return ("json", s)
    if kind == 2:
        s = rng.choice(SCHEMAS)
        body["guided_json"] = json.dumps(s) if rng.random() < 0.5 else s
        return ("json", s)
    if kind == 3:
        p = rng.choice(REGEXES)
        body["guided_regex"] = p
        return ("regex", p)
    if kind == 4:
        c = rng.choice(CHOICES)
        body["structured_outputs"] = {"choice": c}
        return ("choice", c)
    if kind == 5:
        body["guided_grammar"] = rng.choice(GRAMMARS)
        return None
    if kind == 6:
        body[rng.choice(["guided_json", "response_format"])] = (
            {"type": "json_schema", "json_schema": {"schema": rng.choice(BAD_SCHEMAS)}}
            if rng.random() < 0.5 else rng.choice(BAD_SCHEMAS))
        return None
    if kind == 7:
        body[rng.choice(["guided_regex", "guided_grammar"])] = rng.choice(BAD_REGEXES + BAD_GRAMMARS)
        return None
    # Two at once: refused.
    body["guided_regex"] = rng.choice(REGEXES)
    body["guided_choice"] = rng.choice(CHOICES)
    return None


def sampling(rng, body, chat):
    """Sampling fields, each present with some probability."""
    fields = {
        "temperature": lambda: rng.choice([0, 0.3, 1.0, 2.0]),
        "top_p": lambda: rng.choice([0.1, 0.9, 1.0]),
        "top_k": lambda: rng.choice([-1, 0, 1, 40]),
        "min_p": lambda: rng.choice([0.0, 0.05, 1.0]),
        "seed": lambda: rng.randrange(-5, 2**40),
        "stop": lambda: rng.choice(["\n", ["the", "."], ["a", "b", "c", "d"]]),
        "presence_penalty": lambda: rng.uniform(-2, 2),
        "frequency_penalty": lambda: rng.uniform(-2, 2),
        "repetition_penalty": lambda: rng.choice([0.5, 1.0, 1.3, 10]),
        "logit_bias": lambda: {str(rng.randrange(0, 50000)): rng.uniform(-100, 100)},
        "stop_token_ids": lambda: [rng.randrange(0, 50000)],
        "min_tokens": lambda: rng.randrange(0, 4),
        "ignore_eos": lambda: rng.random() < 0.5,
        "priority": lambda: rng.choice(["low", "normal", "high", "critical", -20, 0, 3]),
        "n": lambda: rng.randrange(1, 4),
        "logprobs_mode": lambda: rng.choice(["raw_logprobs", "processed_logprobs"]),
        "user": lambda: "someone",
    }
    for key, valid in fields.items():
        if rng.random() < 0.2:
            body[key] = sometimes(rng, valid, 0.92)
    if chat and rng.random() < 0.3:
        body["logprobs"] = sometimes(rng, lambda: True, 0.85)
        if rng.random() < 0.7:
            body["top_logprobs"] = sometimes(rng, lambda: rng.randrange(0, 21), 0.85)
    elif not chat and rng.random() < 0.3:
        body["logprobs"] = sometimes(rng, lambda: rng.randrange(0, 6), 0.85)


def messages(rng):
    """A conversation, now and then with parts, tool turns or a bad message."""
    out = []
    if rng.random() < 0.4:
        out.append({"role": rng.choice(["system", "developer"]), "content": "Answer briefly."})
    for _ in range(rng.randrange(1, 4)):
        text = rng.choice(["What is 2+2?", "Name a colour.", "Weather in Oslo?", "", "\u00bfQu\u00e9 tal?"])
        r = rng.random()
        if r < 0.15:
            out.append({"role": "user", "content": [{"type": "text", "text": text},
                                                    {"type": "text", "text": "Thanks."}]})
        elif r < 0.2:
            out.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})
        elif r < 0.3:
            out.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]})
            out.append({"role": "tool", "tool_call_id": "call_1", "content": "12 C, rain"})
            out.append({"role": "user", "content": text})
        elif r < 0.35:
            out.append(junk(rng))
        elif r < 0.4:
            out.append({"role": rng.choice(["narrator", 5]), "content": text})
        else:
            out.append({"role": "user", "content": text})
    return out


def body_for(rng, route):
    """A body for `route`, and what a finished answer must satisfy."""
    check = None
    max_tokens = rng.randrange(1, 9)
    if route == "/v1/completions":
        body = {"prompt": sometimes(rng, lambda: rng.choice(
            ["Once upon a time", ["The sky is"], [1, 2, 3, 4], "\u4f60\u597d", "",
             ["Red", [1, 2], "Blue"], [[5, 6], [7]]]), 0.9),
            "max_tokens": sometimes(rng, lambda: max_tokens, 0.9)}
        if rng.random() < 0.15:
            body["echo"] = sometimes(rng, lambda: True)
            if rng.random() < 0.5:
                body["max_tokens"] = 0
        sampling(rng, body, False)
    elif route == "/v1/chat/completions":
        key = rng.choice(["max_tokens", "max_completion_tokens"])
        body = {"messages": sometimes(rng, lambda: messages(rng), 0.9),
                key: sometimes(rng, lambda: max_tokens, 0.9)}
        sampling(rng, body, True)
        if rng.random() < 0.3:
            body["tools"] = sometimes(rng, lambda: [TOOL], 0.85)
            if rng.random() < 0.6:
                body["tool_choice"] = sometimes(rng, lambda: rng.choice(
                    ["none", "auto", "required",
                     {"type": "function", "function": {"name": "get_weather"}},
                     {"type": "function", "function": {"name": "missing"}}]), 0.85)
            if rng.random() < 0.3:
                body["parallel_tool_calls"] = sometimes(rng, lambda: False)
    elif route == "/tokenize":
        body = rng.choice([{"prompt": sometimes(rng, lambda: "Hello there")},
                           {"content": "abc", "add_special": sometimes(rng, lambda: False)},
                           {"messages": messages(rng), "add_generation_prompt": sometimes(rng, lambda: True)}])
    elif route == "/detokenize":
        body = {"tokens": sometimes(rng, lambda: [rng.randrange(0, 49152) for _ in range(4)], 0.7)}
    elif route == "/v1/responses":
        body = {"input": sometimes(rng, lambda: rng.choice([
            "What is 2+2?",
            [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
            [{"role": "user", "content": "Weather?"},
             {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
             {"type": "function_call_output", "call_id": "c1", "output": "rain"}],
            [{"type": "item_reference", "id": "x"}]]), 0.9),
            "max_output_tokens": sometimes(rng, lambda: max_tokens, 0.9)}
        if rng.random() < 0.3:
            body["instructions"] = sometimes(rng, lambda: "Be brief.")
        if rng.random() < 0.3:
            body["tools"] = sometimes(rng, lambda: [dict(TOOL["function"], type="function")], 0.85)
            body["tool_choice"] = sometimes(rng, lambda: rng.choice(
                ["none", "auto", "required", {"type": "function", "name": "get_weather"}]), 0.85)
        if rng.random() < 0.2:
            body["text"] = {"format": sometimes(rng, lambda: rng.choice([
                {"type": "json_object"},
                {"type": "json_schema", "name": "s", "schema": rng.choice(SCHEMAS)}]), 0.85)}
        if rng.random() < 0.05:
            body["previous_response_id"] = "resp_1"
        for key in ("temperature", "top_p", "seed"):
            if rng.random() < 0.2:
                body[key] = sometimes(rng, lambda: rng.choice([0, 0.5, 1.0]), 0.9)
    else:  # /generate, SGLang's native body
        key = rng.choice(["text", "input_ids"])
        body = {key: sometimes(rng, lambda: "Hi" if key == "text" else [1, 2, 3], 0.8),
                "sampling_params": sometimes(rng, lambda: {"max_new_tokens": max_tokens,
                                                           "temperature": rng.choice([0, 0.8])}, 0.85)}
    if route in ("/v1/completions", "/v1/chat/completions", "/generate", "/v1/responses"):
        if rng.random() < 0.3:
            body["stream"] = sometimes(rng, lambda: True, 0.9)
            if rng.random() < 0.3:
                body["stream_options"] = sometimes(rng, lambda: {"include_usage": True})
    if route in ("/v1/completions", "/v1/chat/completions") and rng.random() < 0.3:
        check = structured(rng, body)
    return body, check


def raw_body(rng):
    """Bytes that are not a request: broken, deep, huge or not UTF-8."""
    return rng.choice([
        b"", b"{", b"[1, 2]", b"null", b"\xff\xfe{}", b'{"prompt": "a", "prompt": 5}',
        b"[" * 4000 + b"]" * 4000, b'{"prompt": "' + b"a" * 300000 + b'"}',
        b'{"prompt": "a", "max_tokens": 1e999}', b'{"prompt": "\\ud800"}',
    ])


def post(base, path, data, drop_stream):
    """(status, headers, body); with `drop_stream` a 200 stream is closed
    after its first chunk (body None)."""
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    try:
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if drop_stream and resp.status == 200 and "event-stream" in resp.getheader("content-type", ""):
            resp.read(64)
            return resp.status, resp, None
        return resp.status, resp, resp.read()
    finally:
        conn.close()


def check_error(status, body, where):
    assert status in ERROR_STATUSES, f"{where}: status {status}: {body[:300]!r}"
    err = json.loads(body)["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["message"], f"{where}: {err}"


def check_finished(text, check, where):
    """A valid constraint's finished answer is what it asked for."""
    if check is None:
        return
    kind, want = check
    if kind == "json":
        jsonschema.validate(json.loads(text), want)
    elif kind == "regex":
        assert re.fullmatch(want, text), f"{where}: {text!r} !~ {want}"
    elif kind == "choice":
        assert text in want, f"{where}: {text!r} not in {want}"


def check_ok(route, body, raw, check, streamed, where):
    """A 200's contracts."""
    if route in ("/tokenize", "/detokenize"):
        json.loads(raw)
        return
    if streamed and route == "/v1/responses":
        events = [json.loads(line[len("data: "):]) for e in raw.decode().split("\n\n")
                  for line in e.split("\n") if line.startswith("data: ")]
        assert [e["sequence_number"] for e in events] == list(range(len(events))), where
        assert events[-1]["type"] in ("response.completed", "response.incomplete", "response.failed"), \
            f"{where}: {events[-1]}"
        return
    if streamed:
        events = [e[len("data: "):] for e in raw.decode().split("\n\n") if e.startswith("data: ")]
        assert events, f"{where}: an empty stream"
        assert events[-1] == "[DONE]" or "error" in json.loads(events[-1]), f"{where}: {events[-3:]}"
        for e in events[:-1]:
            json.loads(e)
        return
    v = json.loads(raw)
    if route == "/generate":
        assert "text" in v and v["meta_info"]["finish_reason"] is not None, f"{where}: {v}"
        return
    if route == "/v1/responses":
        assert v["object"] == "response" and v["status"] in ("completed", "incomplete"), f"{where}: {v}"
        assert v["output"] and all(i["type"] in ("message", "function_call") for i in v["output"]), where
        most = body.get("max_output_tokens")
        if isinstance(most, int) and not isinstance(most, bool):
            assert v["usage"]["output_tokens"] <= most, f"{where}: {v['usage']}"
        return
    prompt = body.get("prompt")
    prompts = len(prompt) if isinstance(prompt, list) and not all(
        isinstance(t, int) for t in prompt) else 1
    n = body.get("n", 1)
    assert len(v["choices"]) == n * prompts, f"{where}: {len(v['choices'])} choices for n={n}"
    assert sorted(c["index"] for c in v["choices"]) == list(range(n * prompts)), where
    most = body.get("max_tokens", body.get("max_completion_tokens"))
    if most is not None:
        assert v["usage"]["completion_tokens"] <= n * prompts * max(most, 1), f"{where}: {v['usage']}"
    for c in v["choices"]:
        assert c["finish_reason"] in FINISH, f"{where}: {c}"
        text = c["message"]["content"] if "message" in c else c["text"]
        if c["finish_reason"] == "stop" and not body.get("echo") and not body.get("stop") \
                and "stop_token_ids" not in body and "logit_bias" not in body:
            check_finished(text or "", check, where)


def one(base, seed):
    rng = random.Random(seed)
    route = rng.choice(["/v1/completions", "/v1/chat/completions", "/v1/completions",
                        "/v1/chat/completions", "/v1/responses", "/tokenize", "/detokenize",
                        "/generate"])
    where = f"seed {seed} {route}"
    if rng.random() < 0.08:
        data, body, check = raw_body(rng), None, None
    else:
        body, check = body_for(rng, route)
        data = json.dumps(body).encode()
    where += " " + data[:400].decode("utf-8", "replace")
    streamed = isinstance(body, dict) and body.get("stream") is True
    drop = streamed and rng.random() < 0.3
    status, resp, raw = post(base, route, data, drop)
    assert status < 500, f"{where}: {status} {raw!r}"
    if status != 200:
        check_error(status, raw, where)
        return "refused"
    if raw is None:
        return "dropped"
    try:
        check_ok(route, body, raw, check, streamed, where)
    except (AssertionError, ValueError, jsonschema.ValidationError) as e:
        raise AssertionError(f"{where}: {e}: {raw[:600]!r}") from e
    return "ok"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    # The routes are the server's root's (`/v1/...`, `/tokenize`, `/generate`).
    args.base_url = args.base_url.removesuffix("/").removesuffix("/v1")
    seeds = [args.seed * 1_000_003 + i for i in range(args.count)]
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda s: one(args.base_url, s), seeds))
    counts = {k: outcomes.count(k) for k in ("ok", "refused", "dropped")}
    # The mix is worth the name: both kinds of answer, in numbers.
    assert counts["ok"] >= args.count // 5 and counts["refused"] >= args.count // 10, counts
    url = urllib.parse.urlsplit(args.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
    print(f"ok random bodies: {counts}")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED {e}", file=sys.stderr)
        sys.exit(1)
