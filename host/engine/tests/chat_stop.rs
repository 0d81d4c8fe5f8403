//! [`StopStrings`] against a naive model of the whole text: walk the
//! concatenated stream byte by byte, stop at the first byte where some stop
//! string ends (the longest of those that end there), and cut the text where
//! it starts. Chunks split stop strings at every boundary and carry
//! multi-byte UTF-8.

use pagoda_engine::chat::StopStrings;
use proptest::prelude::*;

/// The reply the whole text gives, and whether a stop string ended it.
fn naive(text: &str, stops: &[String]) -> (String, bool) {
    for end in 0..=text.len() {
        if !text.is_char_boundary(end) {
            continue;
        }
        let longest = stops
            .iter()
            .filter(|s| !s.is_empty() && text[..end].ends_with(s.as_str()))
            .map(String::len)
            .max();
        if let Some(len) = longest {
            return (text[..end - len].to_string(), true);
        }
    }
    (text.to_string(), false)
}

/// Bytes at the end of `text` that could begin some stop string.
fn naive_held(text: &str, stops: &[String]) -> usize {
    (0..=text.len())
        .filter(|&k| text.is_char_boundary(k))
        .find(|&k| k < text.len() && stops.iter().any(|s| s.starts_with(&text[k..])))
        .map_or(0, |k| text.len() - k)
}

/// Streams `chunks` through the matcher, checking each step against the
/// naive model of the text so far; returns the whole reply.
fn stream(chunks: &[&str], stops: &[String]) -> (String, bool) {
    let mut matcher = StopStrings::new(stops);
    let (mut shown, mut seen, mut stopped) = (String::new(), String::new(), false);
    for chunk in chunks {
        seen.push_str(chunk);
        let out = matcher.push(chunk);
        if stopped {
            assert!(out.stopped && out.emit.is_empty(), "output after a stop");
            continue;
        }
        shown.push_str(&out.emit);
        let (want, want_stop) = naive(&seen, stops);
        assert_eq!(
            out.stopped, want_stop,
            "stop reported late or early, text {seen:?}"
        );
        if out.stopped {
            assert_eq!(shown, want, "text {seen:?}");
            stopped = true;
        } else {
            // Everything that cannot start a stop string is shown at once.
            let held = naive_held(&seen, stops);
            assert_eq!(
                shown,
                seen[..seen.len() - held],
                "held back too much or too little"
            );
        }
    }
    if stopped {
        assert_eq!(matcher.finish(), "");
    } else {
        shown.push_str(&matcher.finish());
    }
    (shown, stopped)
}

/// Chunks of `text` cut at the given char positions.
fn cut<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let mut at: Vec<usize> = cuts.iter().map(|c| bounds[c % bounds.len()]).collect();
    at.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for end in at.into_iter().chain([text.len()]) {
        chunks.push(&text[start..end]);
        start = end;
    }
    chunks
}

fn alphabet() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec!['a', 'b', '<', '|', 'é', '日', '😀']),
        0..40,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

fn stop_set() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::collection::vec(
            prop::sample::select(vec!['a', 'b', '<', '|', 'é', '日', '😀']),
            1..5,
        )
        .prop_map(|cs| cs.into_iter().collect::<String>()),
        1..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_chunks_match_the_whole_text(
        text in alphabet(),
        stops in stop_set(),
        cuts in prop::collection::vec(0usize..64, 0..12),
    ) {
        let chunks = cut(&text, &cuts);
        prop_assert_eq!(stream(&chunks, &stops), naive(&text, &stops));
    }

    #[test]
    fn every_two_way_split_and_single_chars(text in alphabet(), stops in stop_set()) {
        let want = naive(&text, &stops);
        for (i, _) in text.char_indices().chain([(text.len(), ' ')]) {
            prop_assert_eq!(stream(&[&text[..i], &text[i..]], &stops), want.clone());
        }
        let singles: Vec<&str> = text.char_indices().map(|(i, c)| &text[i..i + c.len_utf8()]).collect();
        prop_assert_eq!(stream(&singles, &stops), want);
    }
}

#[test]
fn stop_string_split_across_chunks() {
    let stops = ["<|im_end|>".to_string(), "\n\nUser:".to_string()];
    assert_eq!(
        stream(&["Hello wor", "ld<|im", "_e", "nd|> trailing"], &stops),
        ("Hello world".to_string(), true)
    );
    assert_eq!(
        stream(&["a <|im_", "start|>"], &stops),
        ("a <|im_start|>".to_string(), false)
    );
    assert_eq!(
        stream(&["日本", "\n\nUs", "er: hi"], &stops),
        ("日本".to_string(), true)
    );
}

#[test]
fn no_stop_strings_pass_everything_through() {
    let mut m = StopStrings::new(&["".to_string()]);
    let out = m.push("anything");
    assert_eq!((out.emit.as_str(), out.stopped), ("anything", false));
    assert_eq!(m.finish(), "");
}
