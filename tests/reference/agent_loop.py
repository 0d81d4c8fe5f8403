"""A real agent library's tool loop against a live `pagoda serve`: OpenAI's
Agents SDK (`openai-agents`, from PyPI) with a function tool, over the chat
completions API and over the Responses API (the SDK's own default model),
on a chat model (SmolLM2).

    python agent_loop.py --base-url http://127.0.0.1:8000/v1

The agent must call its tool (`tool_choice: required`, enforced by the
server's grammar), with arguments the SDK parses into the function's typed
parameters. Run 1 ends at the tool (`stop_on_first_tool`): its result is
the answer. Run 2 is the SDK's default loop: the result goes back as a
`tool` message and the model runs again (tool choice reset to `auto`)
until it answers or the turn limit ends the run. Run 3 is run 1 over
`OpenAIResponsesModel` (`POST /v1/responses`: input items, a
`function_call` item back). Exits non-zero when a tool did not run as asked
or a run fails otherwise.
"""

import argparse
import asyncio

from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                    function_tool, set_tracing_disabled)
from agents.exceptions import MaxTurnsExceeded
from openai import AsyncOpenAI

CALLS = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city.

    Args:
        city: The city's name.
    """
    CALLS.append(city)
    return f"It is sunny and 21 degrees in {city}."


async def run(base_url):
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=300)
    model_name = (await client.models.list()).data[0].id
    settings = ModelSettings(tool_choice="required", parallel_tool_calls=False, temperature=0,
                             max_tokens=128)

    def agent(api=OpenAIChatCompletionsModel, **kw):
        return Agent(
            name="weather",
            instructions="Call get_weather once. When a tool_response is given, answer the user with it.",
            tools=[get_weather],
            model=api(model=model_name, openai_client=client),
            model_settings=settings,
            **kw,
        )

    # 1. The tool's result as the run's answer: one model turn, one call.
    result = await Runner.run(agent(tool_use_behavior="stop_on_first_tool"),
                              "What is the weather in Paris?", max_turns=2)
    assert CALLS == ["Paris"], CALLS
    assert result.final_output == "It is sunny and 21 degrees in Paris.", result.final_output
    print(f"ok agent (openai-agents), stopping at its tool: called get_weather({CALLS[0]!r}), "
          f"answer {result.final_output!r}")

    # 2. The SDK's default loop: after each call its result goes back as a
    # `tool` message and the model runs again (tool choice back to `auto`)
    # until it answers in text or the turns run out. (SmolLM2-135M keeps
    # calling the tool; a turn limit then ends the loop.)
    CALLS.clear()
    try:
        result = await Runner.run(agent(), "What is the weather in Paris?", max_turns=3)
        ending = f"answer {result.final_output!r}"
    except MaxTurnsExceeded:
        ending = "the turn limit (the model called again instead of answering)"
    assert len(CALLS) >= 1 and all(c == "Paris" for c in CALLS), CALLS
    print(f"ok agent loop (openai-agents): {len(CALLS)} tool call(s) run and answered, ended by {ending}")

    # 3. Run 1 over the Responses API.
    CALLS.clear()
    result = await Runner.run(agent(api=OpenAIResponsesModel, tool_use_behavior="stop_on_first_tool"),
                              "What is the weather in Paris?", max_turns=2)
    assert CALLS == ["Paris"], CALLS
    assert result.final_output == "It is sunny and 21 degrees in Paris.", result.final_output
    print(f"ok agent over the Responses API: called get_weather({CALLS[0]!r}), "
          f"answer {result.final_output!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    args = ap.parse_args()
    asyncio.run(run(args.base_url))


if __name__ == "__main__":
    main()
