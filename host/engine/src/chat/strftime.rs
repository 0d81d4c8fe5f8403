//! `strftime_now(format)`, which Llama-3-style templates call to print
//! today's date. The clock is read in UTC (servers run in UTC; Python reads
//! local time, which is the same there), and the directives are Python's for
//! the C locale.

use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::{Error, ErrorKind};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The template function.
pub(super) fn strftime_now(format: &str) -> Result<String, Error> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(format, secs)
}

/// Days since 1970-01-01 to (year, month 1..=12, day 1..=31), by the
/// proleptic Gregorian calendar's 400-year cycles.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// `format` applied to the UTC time `secs` after the epoch.
pub(super) fn format_utc(format: &str, secs: u64) -> Result<String, Error> {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (tod / 3600, tod / 60 % 60, tod % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = CUM[month as usize - 1] + day + u32::from(month > 2 && is_leap(year));
    let month_name = MONTHS[month as usize - 1];
    let day_name = DAYS[weekday];
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let piece = match d {
            'Y' => year.to_string(),
            'y' => format!("{:02}", year.rem_euclid(100)),
            'm' => format!("{month:02}"),
            'd' => format!("{day:02}"),
            'e' => format!("{day:2}"),
            'H' => format!("{hour:02}"),
            'I' => format!("{hour12:02}"),
            'M' => format!("{minute:02}"),
            'S' => format!("{second:02}"),
            'p' => (if hour < 12 { "AM" } else { "PM" }).to_string(),
            'j' => format!("{yday:03}"),
            'B' => month_name.to_string(),
            'b' | 'h' => month_name[..3].to_string(),
            'A' => day_name.to_string(),
            'a' => day_name[..3].to_string(),
            'w' => ((weekday + 1) % 7).to_string(),
            'u' => (weekday + 1).to_string(),
            'F' => format!("{year}-{month:02}-{day:02}"),
            'T' => format!("{hour:02}:{minute:02}:{second:02}"),
            'Z' => "UTC".to_string(),
            'z' => "+0000".to_string(),
            '%' => "%".to_string(),
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("strftime_now: unsupported directive %{other}"),
                ))
            }
        };
        out.push_str(&piece);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::format_utc;

    #[test]
    fn known_instants() {
        // Checked against `date -u -d @SECS '+%Y-%m-%d %H:%M:%S %a %b %j %I %p'`.
        assert_eq!(
            format_utc("%Y-%m-%d %H:%M:%S %a %b %j %I %p", 0).unwrap(),
            "1970-01-01 00:00:00 Thu Jan 001 12 AM"
        );
        assert_eq!(
            format_utc("%Y-%m-%d %H:%M:%S %a %b %j %I %p", 951_827_696).unwrap(),
            "2000-02-29 12:34:56 Tue Feb 060 12 PM"
        );
        assert_eq!(
            format_utc("%d %B %Y %A", 1_798_761_599).unwrap(),
            "31 December 2026 Thursday"
        );
        assert!(format_utc("%Q", 0).is_err());
    }
}
