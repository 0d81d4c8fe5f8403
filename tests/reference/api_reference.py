"""The agent-facing API against independent references, on a live
`pagoda serve` of a real model (SmolLM2), through the official OpenAI
client. Exits non-zero on the first failed check.

    python api_reference.py --base-url http://127.0.0.1:8000/v1 --model FILE.gguf

The server runs with `--activations f32`, so its logits are the model's
within f32 rounding and an f16 KV cache. Checks:

1. `echo` with `logprobs` and `max_tokens: 0` scores the prompt: the text is
   the prompt, nothing is generated, the first token's log probability is
   null and every other equals the log-softmax of the NumPy reference
   (forward_ref.py, float64 over gguf's dequantization) within TOL nats, as
   does the most likely alternative at each position.
2. A greedy completion's log probabilities equal the reference's, token by
   token, the reference's own greedy choice being the server's token (a
   near tie, where they may differ, ends the comparison and is reported).
3. Presence and frequency penalties move a repeated token's log
   probability by exactly the stated amount: two greedy requests with the
   same penalties (so the same output), one reporting raw log
   probabilities and one processed ones (`logprobs_mode`); at each step
   the difference of the two for the sampled token, minus that for an
   alternative the output does not hold, is minus the token's penalty
   (count × frequency + presence).
4. 20 varied JSON schemas through `response_format`: every answer parses
   and validates (`jsonschema`).
"""

import argparse
import json
import os
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import numpy as np
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward_ref import KvCache, Model  # noqa: E402

# Log probabilities against the reference, in nats: f32 arithmetic and an
# f16 KV cache against float64 (measured: about 3e-3 on SmolLM2).
TOL = 0.02
# Penalties as the engine applies them: f32 sums, so to 1e-3 nats.
PENALTY_TOL = 1e-3


def post(base, path, body):
    root = base.rsplit("/v1", 1)[0]
    req = urllib.request.Request(root + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def log_softmax(row):
    m = row.max()
    return row - (m + np.log(np.exp(row - m).sum()))


def token_text(base, token):
    return post(base, "/detokenize", {"tokens": [int(token)]})["prompt"]


def echo_scores(client, base, model_name, ref):
    text = "The capital of France is Paris. The capital of Germany is Berlin, and"
    ids = post(base, "/tokenize", {"prompt": text})["tokens"]
    r = client.completions.create(model=model_name, prompt=ids, echo=True, logprobs=3,
                                  max_tokens=0, temperature=0)
    c = r.choices[0]
    assert r.usage.completion_tokens == 0, r.usage
    lp = c.logprobs
    assert len(lp.tokens) == len(ids), (len(lp.tokens), len(ids))
    assert c.text == "".join(lp.tokens), c.text
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, lp
    assert lp.text_offset[0] == 0 and lp.text_offset[-1] == len(c.text) - len(lp.tokens[-1])
    logits = ref.forward(ids)
    worst = 0.0
    for i in range(1, len(ids)):
        want = log_softmax(logits[i - 1])
        worst = max(worst, abs(lp.token_logprobs[i] - want[ids[i]]))
        best = max(lp.top_logprobs[i].values())
        worst = max(worst, abs(best - want.max()))
        assert len(lp.top_logprobs[i]) <= 3
    assert worst < TOL, f"prompt scores off the reference by {worst:.2e} nats"
    print(f"ok echo: {len(ids) - 1} prompt scores within {worst:.1e} nats of the reference")

    # Streamed: the same scores, in a chunk of their own before the rest.
    chunks = list(client.completions.create(model=model_name, prompt=ids, echo=True, logprobs=3,
                                            max_tokens=2, temperature=0, stream=True))
    first = chunks[0].choices[0]
    assert first.text == c.text, first.text
    assert first.logprobs.token_logprobs[1:] == lp.token_logprobs[1:]
    # Echo without logprobs: the prompt, then the completion.
    plain = client.completions.create(model=model_name, prompt=text, echo=True, max_tokens=3,
                                      temperature=0)
    assert plain.choices[0].text.startswith(c.text), plain.choices[0].text
    print("ok echo streamed, and without logprobs")
    return ids


def greedy_logprobs(client, base, model_name, ref, ids):
    r = client.completions.create(model=model_name, prompt=ids, max_tokens=8, temperature=0,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    # Each step runs its token against the keys and values kept so far.
    cache = KvCache(ref.layers)
    logits = ref.forward(ids, last_only=True, cache=cache)[0]
    worst, compared = 0.0, 0
    for j, (text, got) in enumerate(zip(lp.tokens, lp.token_logprobs)):
        row = log_softmax(logits)
        order = np.argsort(row)[::-1]
        best = int(order[0])
        if token_text(base, best) != text:
            gap = row[order[0]] - row[order[1]]
            print(f"note: step {j} differs from the reference's greedy token (top-two gap {gap:.3f}): stop comparing")
            break
        worst = max(worst, abs(got - row[best]))
        compared += 1
        logits = ref.forward([best], cache=cache)[0]
    assert compared >= 4, f"only {compared} steps agreed with the reference"
    assert worst < TOL, f"generated log probabilities off the reference by {worst:.2e} nats"
    print(f"ok greedy log probabilities: {compared} tokens within {worst:.1e} nats of the reference")


def penalties(client, model_name):
    # A prompt that makes the model repeat itself.
    kw = dict(model=model_name, prompt="one two one two one two one two one two", max_tokens=24,
              temperature=0, logprobs=20)
    pen = dict(frequency_penalty=0.7, presence_penalty=0.4)
    # One at a time: each alone in its steps, so the raw logits of the two
    # are the same sums.
    raw = client.completions.create(**kw, **pen)
    proc = client.completions.create(**kw, **pen, extra_body={"logprobs_mode": "processed_logprobs"})
    a, b = raw.choices[0].logprobs, proc.choices[0].logprobs
    assert a.tokens == b.tokens, "the same penalties give the same greedy output"
    checked, repeated = 0, 0
    for j, token in enumerate(a.tokens):
        count = a.tokens[:j].count(token)
        penalty = count * pen["frequency_penalty"] + (pen["presence_penalty"] if count else 0.0)
        shift = b.token_logprobs[j] - a.token_logprobs[j]
        # An alternative the output does not hold (no penalty), in both lists.
        others = [t for t in a.top_logprobs[j] if t not in a.tokens[:j] and t in b.top_logprobs[j]]
        if not others:
            continue
        alt = others[0]
        alt_shift = b.top_logprobs[j][alt] - a.top_logprobs[j][alt]
        err = abs((shift - alt_shift) + penalty)
        assert err < PENALTY_TOL, f"step {j}: {token!r} seen {count} times moved by {shift - alt_shift:.4f}, want {-penalty:.4f}"
        checked += 1
        repeated += count > 0
    assert repeated >= 3, f"only {repeated} steps repeated a token"
    # Without penalties the raw and processed log probabilities are equal.
    same = client.completions.create(**kw, extra_body={"logprobs_mode": "processed_logprobs"})
    base = client.completions.create(**kw)
    assert same.choices[0].logprobs.token_logprobs == base.choices[0].logprobs.token_logprobs
    print(f"ok penalties: {checked} steps ({repeated} of a repeated token) moved by the stated amount")


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}},
     "required": ["name"], "additionalProperties": False},
    {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["age"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
     "required": ["color"]},
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
    {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 2, "maxItems": 3},
    {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 16},
        "population": {"type": "integer", "minimum": 0}},
     "required": ["city", "population"], "additionalProperties": False},
    {"type": "object", "properties": {"point": {
        "type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x", "y"]}}, "required": ["point"]},
    {"type": "object", "properties": {"tags": {
        "type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
     "required": ["tags"]},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 6}]}},
     "required": ["value"]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}[0-9]{2}$"}},
     "required": ["code"]},
    {"type": "object", "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
     "required": ["score"]},
    {"type": "object", "properties": {"user": {
        "type": "object", "properties": {
            "id": {"type": "integer"},
            "email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.com$"}},
        "required": ["id", "email"], "additionalProperties": False}},
     "required": ["user"], "additionalProperties": False},
    {"type": "object", "properties": {"answer": {"const": "yes"}}, "required": ["answer"]},
    {"type": "object", "properties": {
        "items": {"type": "array", "maxItems": 2, "items": {
            "type": "object", "properties": {"sku": {"type": "string", "maxLength": 6},
                                             "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["sku", "qty"], "additionalProperties": False}}},
     "required": ["items"]},
    {"type": "object", "properties": {"maybe": {"type": ["string", "null"], "maxLength": 10}},
     "required": ["maybe"]},
    {"type": "object", "properties": {
        "first": {"type": "string", "maxLength": 10}, "last": {"type": "string", "maxLength": 10},
        "middle": {"type": "string", "maxLength": 10}},
     "required": ["first", "last"], "additionalProperties": False},
    {"type": "object", "properties": {"matrix": {
        "type": "array", "maxItems": 2, "items": {"type": "array", "maxItems": 2, "items": {"type": "integer"}}}},
     "required": ["matrix"]},
    {"type": "object", "properties": {"status": {"enum": ["open", "closed"]},
                                      "count": {"type": "integer", "minimum": -5, "maximum": 5}},
     "required": ["status", "count"], "additionalProperties": False},
    {"type": "object", "properties": {"date": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"},
                                      "done": {"type": "boolean"}},
     "required": ["date", "done"], "additionalProperties": False},
]


def closed(schema):
    """The schema with every object closed (`additionalProperties: false`,
    as OpenAI's strict mode asks): an open object lets a small model add
    properties until it runs out of tokens."""
    if isinstance(schema, dict):
        schema = {k: closed(v) for k, v in schema.items()}
        if schema.get("type") == "object":
            schema.setdefault("additionalProperties", False)
    elif isinstance(schema, list):
        schema = [closed(v) for v in schema]
    return schema


def schemas(client, model_name):
    """All 20 at once: the server batches them."""
    assert len(SCHEMAS) == 20

    def ask(i, schema):
        jsonschema.Draft202012Validator.check_schema(schema)
        r = client.completions.create(
            model=model_name, prompt=f"Fill in an example record #{i}:", max_tokens=160,
            temperature=0.8, seed=i,
            extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}}})
        text = r.choices[0].text
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise AssertionError(f"schema {i} ({r.choices[0].finish_reason}): {text!r}") from e
        jsonschema.validate(value, schema)

    with ThreadPoolExecutor(max_workers=len(SCHEMAS)) as pool:
        for f in [pool.submit(ask, i, s) for i, s in enumerate(map(closed, SCHEMAS))]:
            f.result()
    print(f"ok {len(SCHEMAS)} JSON schemas: every answer parses and validates")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True, help="the GGUF file the server runs")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="none", max_retries=0, timeout=300)
    name = client.models.list().data[0].id
    ref = Model(args.model)
    ids = echo_scores(client, args.base_url, name, ref)
    greedy_logprobs(client, args.base_url, name, ref, ids)
    penalties(client, name)
    schemas(client, name)


if __name__ == "__main__":
    main()
