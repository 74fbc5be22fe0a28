//! The live view: the frame redrawn every interval in the terminal's alternate screen, with
//! keys to quit, sort and scroll. Only the terminal handling lives here (through ratatui and
//! crossterm); what a frame says is [`super::frame::render`].

use super::frame::{self, Sort, Style, View};
use super::model;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style as TuiStyle};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::Paragraph;
use std::path::Path;
use std::time::{Duration, Instant};

/// What a key does.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Quit,
    Sort(Option<Sort>),
    Scroll(isize),
    Top,
    Bottom,
    None,
}

fn action(code: KeyCode, modifiers: KeyModifiers, page: isize) -> Action {
    match code {
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Char('s') => Action::Sort(None),
        KeyCode::Char('m') => Action::Sort(Some(Sort::InUse)),
        KeyCode::Char('r') => Action::Sort(Some(Sort::Refusals)),
        KeyCode::Char('p') => Action::Sort(Some(Sort::Pid)),
        KeyCode::Char('n') => Action::Sort(Some(Sort::Name)),
        KeyCode::Up | KeyCode::Char('k') => Action::Scroll(-1),
        KeyCode::Down | KeyCode::Char('j') => Action::Scroll(1),
        KeyCode::PageUp => Action::Scroll(-page),
        KeyCode::PageDown | KeyCode::Char(' ') => Action::Scroll(page),
        KeyCode::Home | KeyCode::Char('g') => Action::Top,
        KeyCode::End | KeyCode::Char('G') => Action::Bottom,
        _ => Action::None,
    }
}

/// Colour unless NO_COLOR is set or the terminal says it has none; the frame reads the
/// same without (bold and reverse video mark the headings).
fn colour_wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

fn tui_style(style: Style, colour: bool) -> TuiStyle {
    let s = TuiStyle::default();
    let c = |s: TuiStyle, c: Color| if colour { s.fg(c) } else { s };
    match style {
        Style::Plain => s,
        Style::Title => s.add_modifier(Modifier::REVERSED | Modifier::BOLD),
        Style::Header => s.add_modifier(Modifier::UNDERLINED),
        Style::Gpu => c(s.add_modifier(Modifier::BOLD), Color::Cyan),
        Style::Group => s.add_modifier(Modifier::BOLD),
        Style::Dim => c(s, Color::DarkGray),
        Style::Ok => c(s, Color::Green),
        Style::Warn => c(s, Color::Yellow),
        Style::Full => c(s.add_modifier(Modifier::BOLD), Color::Red),
        Style::Refusal => c(s, Color::Red),
    }
}

fn to_text(lines: Vec<frame::Line>, colour: bool) -> Text<'static> {
    Text::from(
        lines
            .into_iter()
            .map(|l| {
                Line::from(
                    l.into_iter()
                        .map(|sp| Span::styled(sp.text, tui_style(sp.style, colour)))
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>(),
    )
}

/// Runs the live view until a quit key. The terminal is restored on every way out.
pub fn run(state_dir: &Path, interval: Duration) -> Result<(), String> {
    let mut terminal = ratatui::try_init().map_err(|e| format!("the terminal: {e}"))?;
    let result = live(&mut terminal, state_dir, interval);
    ratatui::restore();
    result
}

fn live(
    terminal: &mut ratatui::DefaultTerminal,
    state_dir: &Path,
    interval: Duration,
) -> Result<(), String> {
    let colour = colour_wanted();
    let (mut sort, mut scroll) = (Sort::InUse, 0usize);
    let mut snap = model::read(state_dir);
    let mut read_at = Instant::now();
    loop {
        let size = terminal.size().map_err(|e| e.to_string())?;
        let body_h = usize::from(size.height.saturating_sub(1)).max(1);
        let lines = frame::render(
            &snap,
            &View {
                width: usize::from(size.width),
                sort,
            },
        );
        let count = lines.len();
        scroll = scroll.min(count.saturating_sub(body_h));
        let footer = format!(
            " q quit  s sort ({})  m r p n  ↑↓ PgUp PgDn scroll  lines {}-{} of {count}",
            sort.words(),
            scroll + 1,
            (scroll + body_h).min(count)
        );
        let text = to_text(lines, colour);
        terminal
            .draw(|f| {
                let [body, foot] =
                    Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(f.area());
                f.render_widget(
                    Paragraph::new(text).scroll((scroll.min(usize::from(u16::MAX)) as u16, 0)),
                    body,
                );
                f.render_widget(
                    Paragraph::new(footer)
                        .style(TuiStyle::default().add_modifier(Modifier::REVERSED)),
                    foot,
                );
            })
            .map_err(|e| e.to_string())?;
        let wait = interval.saturating_sub(read_at.elapsed());
        if event::poll(wait).map_err(|e| e.to_string())? {
            if let Event::Key(k) = event::read().map_err(|e| e.to_string())? {
                if k.kind != KeyEventKind::Release {
                    match action(k.code, k.modifiers, body_h as isize) {
                        Action::Quit => return Ok(()),
                        Action::Sort(s) => sort = s.unwrap_or(sort.next()),
                        Action::Scroll(d) => scroll = scroll.saturating_add_signed(d),
                        Action::Top => scroll = 0,
                        Action::Bottom => scroll = usize::MAX,
                        Action::None => {}
                    }
                }
            }
            // Any other event (a resize) just redraws.
        }
        if read_at.elapsed() >= interval {
            snap = model::read(state_dir);
            read_at = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let none = KeyModifiers::NONE;
        assert_eq!(action(KeyCode::Char('q'), none, 10), Action::Quit);
        assert_eq!(action(KeyCode::Esc, none, 10), Action::Quit);
        assert_eq!(
            action(KeyCode::Char('c'), KeyModifiers::CONTROL, 10),
            Action::Quit
        );
        assert_eq!(action(KeyCode::Char('s'), none, 10), Action::Sort(None));
        assert_eq!(
            action(KeyCode::Char('p'), none, 10),
            Action::Sort(Some(Sort::Pid))
        );
        assert_eq!(action(KeyCode::PageDown, none, 10), Action::Scroll(10));
        assert_eq!(action(KeyCode::Char('x'), none, 10), Action::None);
    }

    #[test]
    fn without_colour_only_modifiers_remain() {
        assert_eq!(tui_style(Style::Full, false).fg, None);
        assert_eq!(tui_style(Style::Full, true).fg, Some(Color::Red));
    }
}
