"""The official OpenAI Python client against a live `pagoda serve`.

The client's own response types are the reference for the API's shape:
it parses every response and stream chunk with them. Exits non-zero on
the first failed check.

    python openai_client.py --base-url http://127.0.0.1:8000/v1 [--chat] [--api-key KEY]

It checks completions (streamed and not, n, stop, log probabilities in the
legacy shape), chat (log probabilities in the chat shape, sampling
controls) and malformed bodies.

With --api-key the server must refuse a client without it (401,
AuthenticationError) and serve one with it.
"""

import argparse
import json
import time
import urllib.error
import urllib.request

import jsonschema
import openai


def metric(base, name):
    """The first sample of `name` in /metrics."""
    root = base.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(root + "/metrics") as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} missing from /metrics")


API_KEY = None


def post_raw(base, path, data):
    headers = {"Content-Type": "application/json"}
    if API_KEY:
        headers["Authorization"] = f"Bearer {API_KEY}"
    req = urllib.request.Request(base + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_error_body(body, param):
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["param"] == param, err


def completions(client, base, model):
    kw = dict(model=model, prompt="Hello there", max_tokens=10, temperature=0)
    full = client.completions.create(**kw)
    c = full.choices[0]
    assert c.finish_reason in ("length", "stop"), c
    u = full.usage
    assert u.completion_tokens >= 1 and u.total_tokens == u.prompt_tokens + u.completion_tokens, u
    if c.finish_reason == "length":
        assert u.completion_tokens == 10, u

    chunks = list(client.completions.create(stream=True, **kw))
    assert all(ch.usage is None for ch in chunks), "usage only when asked"
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == c.text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == u.completion_tokens
    print("ok completions, streamed and not")

    # A list of prompts (as lm-evaluation-harness batches them): choice
    # `p * n + i` is prompt `p` asked alone, usage sums the prompts.
    batch = ["Hello there", "The sky is", "Hello there"]
    together = client.completions.create(model=model, prompt=batch, max_tokens=6, temperature=0, n=2)
    assert [ch.index for ch in together.choices] == list(range(6)), together
    alone = [client.completions.create(model=model, prompt=p, max_tokens=6, temperature=0) for p in batch]
    for p, one in enumerate(alone):
        for i in range(2):
            assert together.choices[p * 2 + i].text == one.choices[0].text, (p, i, together, one)
    assert together.usage.prompt_tokens == sum(one.usage.prompt_tokens for one in alone), together.usage
    print("ok a list of prompts")

    lp = client.completions.create(logprobs=2, **kw)
    got = lp.choices[0].logprobs
    assert got is not None and len(got.tokens) == lp.usage.completion_tokens, got
    assert all(p <= 0 for p in got.token_logprobs), got
    assert all(1 <= len(t) <= 2 for t in got.top_logprobs), got
    assert got.text_offset == sorted(got.text_offset), got
    if "\ufffd" not in "".join(got.tokens):
        assert "".join(got.tokens) == lp.choices[0].text, (got.tokens, lp.choices[0].text)
    streamed = [ch.choices[0].logprobs for ch in client.completions.create(logprobs=2, stream=True, **kw)
                if ch.choices and ch.choices[0].logprobs]
    assert sum((s.tokens for s in streamed), []) == got.tokens
    assert sum((s.token_logprobs for s in streamed), []) == got.token_logprobs
    print("ok completions logprobs, streamed and not")

    many = client.completions.create(n=3, seed=11, **{**kw, "temperature": 1.0})
    assert sorted(ch.index for ch in many.choices) == [0, 1, 2]
    print("ok n=3")

    if len(c.text) > 6:
        stop = c.text[4:6]
        cut = client.completions.create(stop=[stop], **kw)
        assert cut.choices[0].text == c.text[: c.text.find(stop)], (cut.choices[0].text, c.text, stop)
        assert cut.choices[0].finish_reason == "stop"
        print("ok stop")

    stream = client.completions.create(stream=True, **{**kw, "max_tokens": 1500})
    next(iter(stream))
    stream.close()
    deadline = time.time() + 20
    while metric(base, "vllm:num_requests_running") + metric(base, "vllm:num_requests_waiting") > 0:
        assert time.time() < deadline, "a closed stream kept running"
        time.sleep(0.05)
    print("ok stream closed early")

    status, body = post_raw(base, "/completions", b"{not json")
    assert status == 400, status
    check_error_body(body, None)
    try:
        client.completions.create(model=model, prompt="x", temperature="hot")
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert e.status_code == 400
        inner = e.body.get("error", e.body) if isinstance(e.body, dict) else {}
        assert inner.get("param") == "temperature", e.body
    print("ok malformed bodies")


def chat(client, model, has_template):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    if not has_template:
        try:
            client.chat.completions.create(model=model, messages=messages)
            raise AssertionError("chat without a template")
        except openai.BadRequestError as e:
            assert e.status_code == 400
        print("ok chat refused without a template")
        return
    full = client.chat.completions.create(model=model, messages=messages, max_tokens=24, temperature=0)
    msg = full.choices[0].message
    assert msg.role == "assistant" and msg.content, full
    chunks = list(client.chat.completions.create(
        model=model, messages=messages, max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == msg.content, (text, msg.content)
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    print("ok chat, streamed and not:", json.dumps(msg.content))

    # Content as a list of text parts (the SDK's typed shape) is the same
    # prompt as its texts joined by newlines (vLLM's rendering for string
    # templates); a part that is not text is refused, naming `messages`.
    joined = [{"role": "user", "content": "What is the capital\nof France?"}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is the capital"},
                                          {"type": "text", "text": "of France?"}]}]
    a = client.chat.completions.create(model=model, messages=joined, max_tokens=12, temperature=0)
    b = client.chat.completions.create(model=model, messages=parts, max_tokens=12, temperature=0)
    assert a.usage.prompt_tokens == b.usage.prompt_tokens, (a.usage, b.usage)
    assert a.choices[0].message.content == b.choices[0].message.content, (a, b)
    image = [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]
    try:
        client.chat.completions.create(model=model, messages=image, max_tokens=4)
        raise AssertionError("an image part on a text model")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "messages", e.body
        assert "image_url" in e.body["message"], e.body
    print("ok chat content parts: text joined, an image refused")

    # Log probabilities in the chat shape, parsed by the client's types.
    lp = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0,
                                        logprobs=True, top_logprobs=3)
    content = lp.choices[0].logprobs.content
    assert len(content) == lp.usage.completion_tokens, content
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3, entry
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob, entry
        # Greedy: the sampled token is the most likely one.
        assert abs(entry.logprob - entry.top_logprobs[0].logprob) < 1e-5, entry
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token, entry
    chunks = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0,
                                            logprobs=True, top_logprobs=3, stream=True)
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs
                for e in ch.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content]
    assert [e.logprob for e in streamed] == [e.logprob for e in content]
    print("ok chat logprobs, streamed and not")

    # Sampling controls reach the engine: a forced token, then a stop id.
    eos = client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0,
                                         frequency_penalty=0.5, presence_penalty=0.5,
                                         extra_body={"repetition_penalty": 1.2, "min_p": 0.05})
    assert eos.choices[0].message.content is not None
    print("ok sampling controls accepted")

    # Structured outputs: the answer parses and validates (jsonschema). The
    # number is bounded: unbounded, a 135M model's greedy answer can run
    # into an endless number ("111222222233444...") and be cut at
    # max_tokens, which no grammar forbids.
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40},
                       "population_millions": {"type": "number", "minimum": 0, "maximum": 100}},
        "required": ["city", "population_millions"],
        "additionalProperties": False,
    }
    ask = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
    for temperature in (0, 0.8):
        out = client.chat.completions.create(
            model=model, messages=ask, max_tokens=80, temperature=temperature, seed=5,
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
        answer = json.loads(out.choices[0].message.content)
        jsonschema.validate(answer, schema)
    picked = client.chat.completions.create(model=model, messages=ask, max_tokens=8, temperature=1.0,
                                            extra_body={"guided_choice": ["Paris", "Lyon", "Nice"]})
    assert picked.choices[0].message.content in ("Paris", "Lyon", "Nice"), picked
    print("ok structured outputs:", json.dumps(answer))

    # Tool calls: a required call parses against the function's schema,
    # streamed and not; a named one names it; the result goes back in.
    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                       "required": ["city"], "additionalProperties": False}}}
    clock = {"type": "function", "function": {
        "name": "get_time", "description": "The time in a timezone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 30}},
                       "required": ["zone"], "additionalProperties": False}}}
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    # One call (a small model repeats calls while the grammar lets it).
    one = {"tool_choice": "required", "parallel_tool_calls": False}
    out = client.chat.completions.create(model=model, messages=ask, max_tokens=60, temperature=0,
                                         tools=[weather, clock], **one)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_"), call
    assert call.function.name in ("get_weather", "get_time"), call
    jsonschema.validate(json.loads(call.function.arguments),
                        (weather if call.function.name == "get_weather" else clock)["function"]["parameters"])
    named = client.chat.completions.create(model=model, messages=ask, max_tokens=60, temperature=0.7, seed=2,
                                           tools=[weather, clock], parallel_tool_calls=False,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [c.function.name for c in named.choices[0].message.tool_calls] == ["get_time"], named
    chunks = list(client.chat.completions.create(model=model, messages=ask, max_tokens=60, temperature=0,
                                                 tools=[weather, clock], stream=True, **one))
    streamed = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert [tc.function.name for tc in streamed] == [call.function.name], streamed
    assert streamed[0].function.arguments == call.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    follow = ask + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"forecast": "sunny, 21 C"})},
    ]
    auto = client.chat.completions.create(model=model, messages=follow, max_tokens=60, temperature=0,
                                          tools=[weather, clock], parallel_tool_calls=False)
    m = auto.choices[0].message
    assert m.content or m.tool_calls, auto
    print("ok tool calls:", call.function.name, call.function.arguments)

    # A short answer ends at the model's end-of-turn token; vLLM's
    # `ignore_eos` extension generates on to max_tokens.
    hello = [{"role": "user", "content": "Say hi."}]
    short = client.chat.completions.create(model=model, messages=hello, max_tokens=64, temperature=0)
    assert short.choices[0].finish_reason == "stop", short
    assert short.usage.completion_tokens < 64, short.usage
    long = client.chat.completions.create(model=model, messages=hello, max_tokens=64, temperature=0,
                                          extra_body={"ignore_eos": True})
    assert long.choices[0].finish_reason == "length", long
    assert long.usage.completion_tokens == 64, long.usage
    print("ok ignore_eos:", short.usage.completion_tokens, "tokens without it, 64 with it")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--chat", action="store_true", help="the model has a chat template")
    ap.add_argument("--api-key", help="the key the server requires")
    args = ap.parse_args()
    if args.api_key:
        global API_KEY
        API_KEY = args.api_key
        for key in ("none", args.api_key + "x"):
            stranger = openai.OpenAI(base_url=args.base_url, api_key=key, max_retries=0)
            try:
                stranger.models.list()
                raise AssertionError(f"served a client with key {key!r}")
            except openai.AuthenticationError as e:
                assert e.status_code == 401 and e.code == "invalid_api_key", e.body
        print("ok strangers refused")
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key or "none", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    assert client.models.retrieve(model).id == model
    try:
        client.models.retrieve(model + "-not-served")
        raise AssertionError("a model that is not served")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.code == "model_not_found", e.body
    print("ok models.retrieve")
    completions(client, args.base_url, model)
    chat(client, model, args.chat)


if __name__ == "__main__":
    main()
