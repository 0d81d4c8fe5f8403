//! The formats' parsing, forcing and history, on answers written for them.

use super::*;

#[test]
fn each_format_parses_its_calls_and_keeps_other_text() {
    let hermes = "Let me check.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"time\", \"arguments\": {}}</tool_call>";
    let (content, calls) = parse_output(ToolFormat::Hermes, hermes);
    assert_eq!(content.as_deref(), Some("Let me check."));
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].name, "weather");
    assert_eq!(calls[0].arguments, r#"{"city":"Paris"}"#);
    let (content, calls) = parse_output(ToolFormat::Hermes, "<tool_call>not json</tool_call> hi");
    assert!(calls.is_empty() && content.unwrap().contains("not json"));
    let (content, calls) = parse_output(
        ToolFormat::Llama3,
        "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}",
    );
    assert_eq!((content, calls[0].arguments.as_str()), (None, r#"{"x":1}"#));
    assert_eq!(
        parse_output(ToolFormat::Llama3, "Hello").0.as_deref(),
        Some("Hello")
    );
    let (_, calls) = parse_output(
        ToolFormat::Generic,
        r#"{"tool_calls": [{"name": "a", "arguments": {"k": "v"}}]}"#,
    );
    assert_eq!(calls[0].name, "a");
    let (content, calls) = parse_output(ToolFormat::Generic, r#"{"response": "hi"}"#);
    assert_eq!((content.as_deref(), calls.len()), (Some("hi"), 0));
    // Calls without a name: no call, and the answer is not lost.
    let odd = r#"{"tool_calls": [{"arguments": {}}]}"#;
    let (content, calls) = parse_output(ToolFormat::Generic, odd);
    assert_eq!((content.as_deref(), calls.len()), (Some(odd), 0));
}

#[test]
fn a_history_with_calls_renders_without_tools_offered() {
    let history = vec![
        json!({"role": "user", "content": "Weather?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\":\"Oslo\"}"}},
        ]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "12 C"}),
    ];
    let want = vec![
        json!({"role": "user", "content": "Weather?"}),
        json!({"role": "assistant", "content": r#"{"tool_calls":[{"name":"w","arguments":{"city":"Oslo"}}]}"#}),
        json!({"role": "user", "content": r#"{"tool_response":{"tool_call_id":"c1","content":"12 C"}}"#}),
    ];
    assert_eq!(generic_history(history.clone()), want);
    // Text beside the calls is kept, and read back from an answer.
    let spoken = vec![
        json!({"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "w", "arguments": "{}"}},
        ]}),
    ];
    let written = generic_history(spoken)[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        written,
        r#"{"tool_calls":[{"name":"w","arguments":{}}],"content":"Checking."}"#
    );
    let (content, calls) = parse_output(ToolFormat::Generic, &written);
    assert_eq!((content.as_deref(), calls.len()), (Some("Checking."), 1));
    let off = Tools {
        list: vec![json!({"type": "function", "function": {"name": "w"}})],
        choice: ToolChoice::None,
        parallel: true,
    };
    assert_eq!(
        off.prepare(ToolFormat::Generic, history.clone()),
        (want, None)
    );
    // Templates that know tools get the history as it is.
    assert_eq!(
        off.prepare(ToolFormat::Hermes, history.clone()),
        (history, None)
    );
}

#[test]
fn the_format_comes_from_the_template() {
    assert_eq!(
        ToolFormat::of("{% if tools %}<tool_call>{% endif %}"),
        ToolFormat::Hermes
    );
    assert_eq!(ToolFormat::of("{{ '<|python_tag|>' }}"), ToolFormat::Llama3);
    assert_eq!(
        ToolFormat::of("{{ message['content'] }}"),
        ToolFormat::Generic
    );
}

#[test]
fn tool_requests_are_checked_field_by_field() {
    let tool =
        json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
    let ok = |v: Value| parse(v.as_object().unwrap());
    assert!(ok(json!({})).unwrap().is_none());
    let t = ok(
        json!({"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "f"}}}),
    )
    .unwrap()
    .unwrap();
    assert_eq!(t.choice, ToolChoice::Named("f".into()));
    for (body, param) in [
        (json!({"tools": 3}), "tools"),
        (json!({"tools": [{"type": "function"}]}), "tools"),
        (
            json!({"tools": [tool], "tool_choice": "sometimes"}),
            "tool_choice",
        ),
        (
            json!({"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "g"}}}),
            "tool_choice",
        ),
        (
            json!({"tools": [], "tool_choice": "required"}),
            "tool_choice",
        ),
        (
            json!({"tools": [tool], "parallel_tool_calls": "yes"}),
            "parallel_tool_calls",
        ),
    ] {
        let err = ok(body.clone()).unwrap_err();
        assert_eq!(err.param.as_deref(), Some(param), "{body}");
    }
}

/// A template that writes Mistral's `NAME[ARGS]` calls.
const MISTRAL_V11: &str = "{{ '[TOOL_CALLS]' + name + '[ARGS]' }}";

/// Every format's grammar for `required`, a named call and (generic)
/// `auto` compiles, and what it allows parses back into calls: the
/// lowest allowed byte at each step until the grammar ends.
#[test]
fn forced_calls_compile_and_parse_back() {
    let tool = |name: &str| {
        json!({"type": "function", "function": {"name": name, "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
            "required": ["n"], "additionalProperties": false}}})
    };
    for format in [
        ToolFormat::Hermes,
        ToolFormat::Llama3,
        ToolFormat::Generic,
        ToolFormat::Cohere,
        ToolFormat::Mistral,
        ToolFormat::Kimi,
        ToolFormat::Harmony,
    ] {
        for choice in [
            ToolChoice::Required,
            ToolChoice::Named("go".into()),
            ToolChoice::Auto,
        ] {
            let tools = Tools {
                list: vec![tool("stay"), tool("go")],
                choice: choice.clone(),
                parallel: false,
            };
            // Markers as text: the byte vocabulary has no control
            // tokens.
            let model = GrammarModel {
                control: &|_| None,
                template: MISTRAL_V11,
            };
            let Some(spec) = tools.constraint(format, &model) else {
                assert_eq!(choice, ToolChoice::Auto, "{format:?}");
                assert_ne!(format, ToolFormat::Generic);
                continue;
            };
            let (text, ended) = walk::path(&spec, 200, walk::highest);
            assert!(ended, "{format:?} {choice:?}: {text:?}");
            let (_, calls) = parse_output(format, &text);
            if choice == ToolChoice::Auto {
                continue;
            }
            assert_eq!(calls.len(), 1, "{format:?} {choice:?}: {text:?}");
            if let ToolChoice::Named(n) = &choice {
                assert_eq!(&calls[0].name, n, "{text:?}");
            }
            let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
            assert!(
                args["n"].as_i64().is_some_and(|n| (0..=9).contains(&n)),
                "{text:?}"
            );
        }
    }
}

/// gpt-oss's template is read as harmony; its history gets empty
/// contents for null ones and argument objects for JSON texts, and an
/// answer's calls and content come out of its messages.
#[test]
fn harmony_templates_histories_and_answers() {
    let template = "{{- '<|start|>assistant<|channel|>final<|message|>' }}";
    assert_eq!(ToolFormat::of(template), ToolFormat::Harmony);
    let history = harmony_history(
        [json!({"role": "assistant", "content": null, "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
            {"type": "function", "function": {"name": "g", "arguments": "not json"}}
        ]})],
    );
    assert_eq!(history[0]["content"], json!(""));
    let reasoned = harmony_history([
        json!({"role": "assistant", "content": "Let me look.", "reasoning_content": "Use f.",
               "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
        json!({"role": "assistant", "content": "Done.", "tool_calls": null, "reasoning": "ok"}),
    ]);
    let text = |m: &Value, k: &str| m[k].as_str().map(str::to_string);
    assert_eq!(text(&reasoned[0], "thinking").as_deref(), Some("Use f."));
    assert_eq!(text(&reasoned[0], "content").as_deref(), Some(""));
    assert!(reasoned[1].get("tool_calls").is_none());
    assert_eq!(text(&reasoned[1], "thinking").as_deref(), Some("ok"));
    assert_eq!(text(&reasoned[1], "content").as_deref(), Some("Done."));
    assert_eq!(
        history[0]["tool_calls"][0]["function"]["arguments"],
        json!({"x": 1})
    );
    assert_eq!(
        history[0]["tool_calls"][1]["function"]["arguments"],
        json!("not json")
    );
    let answer = "<|channel|>analysis<|message|>Call f.<|end|><|start|>assistant\
                  <|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": 2}<|call|>";
    let (content, calls) = parse_output(ToolFormat::Harmony, answer);
    assert_eq!(content, None);
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].name.as_str(), calls[0].arguments.as_str()),
        ("f", "{\"x\": 2}")
    );
    assert_eq!(
        reasoning_of(ToolFormat::Harmony, answer).as_deref(),
        Some("Call f.")
    );
    assert_eq!(reasoning_of(ToolFormat::Hermes, answer), None);
}
