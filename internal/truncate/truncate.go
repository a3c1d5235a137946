// Package truncate cuts text to a number of characters, for the log
// line's bounded fields.
package truncate

// Runes returns the first max characters (runes) of s; "" when max ≤ 0.
// Each byte of invalid UTF-8 counts as one character.
func Runes(s string, max int) string {
	if max <= 0 {
		return ""
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i]
		}
		n++
	}
	return s
}
