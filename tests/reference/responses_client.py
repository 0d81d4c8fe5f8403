"""OpenAI's Responses API (`POST /v1/responses`) through the official
OpenAI Python client against a live `pagoda serve` of a chat model: the
client's own types parse every response and stream event. Exits non-zero
on the first failed check.

    python responses_client.py --base-url http://127.0.0.1:8000/v1

The references are the API's contracts and the chat completions the same
conversation gets (the same prompt, so the same greedy answer and usage):
- `input` text and `instructions` answer as the chat messages they stand
  for; a stream's deltas concatenate to the answer, its events numbered
  in order from `response.created` to `response.completed`;
- `text.format` json_schema answers validate (`jsonschema`);
- a required function tool comes back as a `function_call` item whose
  arguments validate against its parameters, streamed and not, and its
  output goes back in as a `function_call_output` item;
- `include: ["message.output_text.logprobs"]` with `top_logprobs` gives
  the chat completion's log probabilities token for token, in the answer,
  in the stream's deltas and in its `done` event; an unknown `include` is a
  400 naming it;
- what needs stored responses (`previous_response_id`) is a 400 naming it.
"""

import argparse
import json

import jsonschema
import openai

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                          "required": ["city"], "additionalProperties": False}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="none", max_retries=0)
    model = client.models.list().data[0].id

    question = "What is the capital of France?"
    r = client.responses.create(model=model, input=question, max_output_tokens=24, temperature=0)
    chat = client.chat.completions.create(model=model, max_tokens=24, temperature=0,
                                          messages=[{"role": "user", "content": question}])
    assert r.object == "response" and r.id.startswith("resp_"), r
    assert r.output_text == chat.choices[0].message.content, (r.output_text, chat)
    assert r.usage.input_tokens == chat.usage.prompt_tokens, (r.usage, chat.usage)
    assert r.usage.output_tokens == chat.usage.completion_tokens, (r.usage, chat.usage)
    want = "incomplete" if chat.choices[0].finish_reason == "length" else "completed"
    assert r.status == want, (r.status, chat.choices[0].finish_reason)
    assert r.output[0].type == "message" and r.output[0].role == "assistant", r.output
    print("ok responses: the chat completion's answer and usage:", json.dumps(r.output_text))

    system = "Answer in one word."
    r = client.responses.create(model=model, instructions=system, max_output_tokens=12, temperature=0,
                                input=[{"role": "user", "content": [{"type": "input_text", "text": question}]}])
    chat = client.chat.completions.create(model=model, max_tokens=12, temperature=0, messages=[
        {"role": "system", "content": system}, {"role": "user", "content": question}])
    assert r.output_text == chat.choices[0].message.content, (r.output_text, chat)
    print("ok responses: instructions and input items as the chat messages")

    events = list(client.responses.create(model=model, input=question, max_output_tokens=24,
                                          temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] in ("response.completed", "response.incomplete"), kinds
    assert [e.sequence_number for e in events] == list(range(len(events))), kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text == final.output_text, (text, final.output_text)
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and done[0].text == text, done
    assert final.usage.output_tokens >= 1, final.usage
    print(f"ok responses streamed: {len(events)} events, the same text")

    # Log probabilities: the chat completion's, token for token, streamed
    # and not; none unless `include` asks.
    chat = client.chat.completions.create(model=model, max_tokens=16, temperature=0, logprobs=True,
                                          top_logprobs=3,
                                          messages=[{"role": "user", "content": question}])
    want = chat.choices[0].logprobs.content
    kw = dict(model=model, input=question, max_output_tokens=16, temperature=0, top_logprobs=3,
              include=["message.output_text.logprobs"])
    r = client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    streamed = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    done = [e for e in events if e.type == "response.output_text.done"][0].logprobs
    for got in (r.output[0].content[0].logprobs, streamed, done):
        assert [g.token for g in got] == [w.token for w in want], (got, want)
        for g, w in zip(got, want):
            assert list(g.bytes) == list(w.bytes) and abs(g.logprob - w.logprob) < 1e-4, (g, w)
            assert len(g.top_logprobs) == 3, g
            assert [t.token for t in g.top_logprobs] == [t.token for t in w.top_logprobs], (g, w)
    assert r.top_logprobs == 3, r
    plain = client.responses.create(model=model, input=question, max_output_tokens=4, temperature=0)
    assert not plain.output[0].content[0].logprobs, plain.output
    try:
        client.responses.create(model=model, input=question, include=["no.such.field"])
        raise AssertionError("an unknown include")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "include", e.body
    print(f"ok responses: logprobs as the chat completion's, {len(want)} tokens, streamed and not")

    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
              "required": ["city"], "additionalProperties": False}
    r = client.responses.create(model=model, input=question + " Answer in JSON.", max_output_tokens=60,
                                temperature=0, text={"format": {"type": "json_schema", "name": "city",
                                                                "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), schema)
    print("ok responses: text.format json_schema:", r.output_text)

    ask = "What is the weather in Paris?"
    for stream in (False, True):
        kw = dict(model=model, input=ask, max_output_tokens=60, temperature=0, tools=[WEATHER],
                  tool_choice="required", parallel_tool_calls=False)
        if stream:
            events = list(client.responses.create(stream=True, **kw))
            assert [e.sequence_number for e in events] == list(range(len(events)))
            r = events[-1].response
            args_done = [e for e in events if e.type == "response.function_call_arguments.done"]
            assert len(args_done) == 1, [e.type for e in events]
        else:
            r = client.responses.create(**kw)
        calls = [item for item in r.output if item.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather", r.output
        jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
        if stream:
            assert args_done[0].arguments == calls[0].arguments
    print("ok responses: a required function call, streamed and not:", calls[0].arguments)

    follow = [{"role": "user", "content": ask},
              {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
               "arguments": calls[0].arguments},
              {"type": "function_call_output", "call_id": calls[0].call_id,
               "output": "It is sunny and 21 degrees."}]
    r = client.responses.create(model=model, input=follow, max_output_tokens=40, temperature=0,
                                tools=[WEATHER], tool_choice="none")
    assert r.output and r.output[0].type == "message" and r.output_text, r.output
    print("ok responses: the call's output goes back in:", json.dumps(r.output_text))

    try:
        client.responses.create(model=model, input="hi", previous_response_id="resp_1")
        raise AssertionError("previous_response_id on a server that stores nothing")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "previous_response_id", e.body
    print("ok responses: previous_response_id refused by name")


if __name__ == "__main__":
    main()
