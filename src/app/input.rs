//! The input box's editor: a multi-line text with a cursor, edited a char at a time.

/// The multi-line input box. `cursor` is a byte index on a char boundary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Input {
    pub text: String,
    pub cursor: usize,
}

impl Input {
    pub(crate) fn insert_char(&mut self, c: char) {
        self.text.insert(self.cursor, c);
        self.cursor += c.len_utf8();
    }

    pub(crate) fn insert_str(&mut self, s: &str) {
        self.text.insert_str(self.cursor, s);
        self.cursor += s.len();
    }

    pub(crate) fn backspace(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
            self.text.remove(self.cursor);
        }
    }

    pub(crate) fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
        }
    }

    pub(crate) fn left(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
        }
    }

    pub(crate) fn right(&mut self) {
        if let Some(c) = self.text[self.cursor..].chars().next() {
            self.cursor += c.len_utf8();
        }
    }

    /// Start of the current line.
    pub(crate) fn home(&mut self) {
        self.cursor = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
    }

    /// End of the current line.
    pub(crate) fn end(&mut self) {
        self.cursor = self.text[self.cursor..]
            .find('\n')
            .map_or(self.text.len(), |i| self.cursor + i);
    }

    pub fn set(&mut self, text: &str) {
        self.text = text.to_string();
        self.cursor = self.text.len();
    }

    pub(crate) fn take(&mut self) -> String {
        self.cursor = 0;
        std::mem::take(&mut self.text)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// (line, column in chars) of the cursor, for drawing it.
    #[cfg(test)]
    pub(crate) fn cursor_line_col(&self) -> (usize, usize) {
        let before = &self.text[..self.cursor];
        let line = before.matches('\n').count();
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
        (line, col)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_editing_is_char_safe() {
        let mut i = Input::default();
        i.insert_str("héllo\nwörld");
        i.home();
        assert_eq!(i.cursor_line_col(), (1, 0));
        i.left();
        i.backspace();
        assert_eq!(i.text, "héll\nwörld");
        i.end();
        i.right();
        i.delete();
        assert_eq!(i.text, "héll\nörld");
        i.set("ü");
        i.backspace();
        i.backspace();
        assert!(i.is_empty());
    }
}
