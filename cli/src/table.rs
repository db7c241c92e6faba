//! Column output like Slurm's tools: right-aligned fixed widths.

/// A column: header, width (negative: left-aligned) and cell text.
pub fn cell(text: &str, width: i32) -> String {
    let w = width.unsigned_abs() as usize;
    let t: String = if text.chars().count() > w && w > 0 {
        text.chars().take(w).collect()
    } else {
        text.to_string()
    };
    if width < 0 {
        format!("{t:<w$}")
    } else {
        format!("{t:>w$}")
    }
}

/// Joins cells with one space, trimming trailing blanks.
pub fn row(cells: &[String]) -> String {
    cells.join(" ").trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_align_and_truncate() {
        assert_eq!(cell("12", 5), "   12");
        assert_eq!(cell("ab", -4), "ab  ");
        assert_eq!(cell("abcdef", 3), "abc");
        assert_eq!(row(&["a".into(), "b  ".into()]), "a b");
    }
}
