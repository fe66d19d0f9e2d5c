package engine

import (
	"strings"
	"unicode/utf8"
)

// GivenBackMark opens the record of a give-back's streak in a job's last
// error: "<why>; given back without spending an attempt (N time(s) in a
// row since T, the last at claim C) …", as the jobs package writes it
// when a worker gives a job back, and reads it back at the job's next
// give-back. Only a give-back's transition, which names its record
// (Transition.Record), stores a mark as is: SetJobs and InsertJobs quote
// it everywhere else (LastErrorText), so that no other text (a handler's
// error or panic, an operator's reason) reads as a give-back's record.
const GivenBackMark = "; given back without spending an attempt ("

// quotedGivenBackMark is GivenBackMark as a last error that is no
// give-back's record keeps it: readable, and no mark.
const quotedGivenBackMark = "; (quoted) given back without spending an attempt ("

// MaxErrorBytes is the most of a job's last error kept (LastErrorText)
// before TruncatedMark.
const MaxErrorBytes = 16 << 10

// TruncatedMark ends a last error cut to MaxErrorBytes (LastErrorText).
const TruncatedMark = "… (truncated)"

// LastErrorText is text as a job keeps it for its last error, as every
// database takes it and as guarantees.md promises it:
//
//   - valid UTF-8 without NUL: each byte that is not part of a valid UTF-8
//     sequence, and each NUL, is written as \xNN;
//   - every GivenBackMark in it quoted ("; (quoted) given back without
//     spending an attempt (…"), but for the last occurrence of record,
//     when record is set, which is kept as written. record is a
//     give-back's record of its streak (Transition.Record): it opens with
//     the mark and holds no other (one that does not, or that is too long
//     to be kept, is none);
//   - then, when longer than MaxErrorBytes, cut on a character boundary
//     (never inside an \xNN) to at most MaxErrorBytes and marked with
//     TruncatedMark. A record the text holds is kept whole: when the cut
//     would fall in it or before it, the text before it is cut instead
//     (and marked), and the record ends the text.
//
// The bound holds on the text as stored: quoting, which makes the text
// longer, comes before the cut. Text kept so comes back unchanged (what
// the jobs package made is written as it is), and so does text with no
// mark, NUL or invalid byte that is not too long.
func LastErrorText(text, record string) string {
	text = validText(text)
	if i := recordIn(text, record); i >= 0 {
		before, after := quoteGivenBackMarks(text[:i]), quoteGivenBackMarks(text[i+len(record):])
		if len(before)+len(record) <= MaxErrorBytes {
			return clipText(before + record + after)
		}
		return cutText(before, MaxErrorBytes-len(record)-len(TruncatedMark)) + TruncatedMark + record
	}
	return clipText(quoteGivenBackMarks(text))
}

// recordIn is where record, a give-back's record (see LastErrorText),
// last occurs in text: -1 when it does not, or when record is none.
func recordIn(text, record string) int {
	if !strings.HasPrefix(record, GivenBackMark) || strings.Count(record, GivenBackMark) != 1 ||
		len(record)+len(TruncatedMark) > MaxErrorBytes/2 {
		return -1
	}
	return strings.LastIndex(text, record)
}

// quoteGivenBackMarks quotes every GivenBackMark in s. The mark overlaps
// no other occurrence of itself, and what quoting inserts ("(quoted) ",
// after the mark's "; ") holds no ";" and is preceded by "; ", not the
// mark's "attempt ": no mark is left, nor made.
func quoteGivenBackMarks(s string) string {
	return strings.ReplaceAll(s, GivenBackMark, quotedGivenBackMark)
}

// validText is s as valid UTF-8 without NUL: each byte that is not part
// of a valid UTF-8 sequence, and each NUL, written as \xNN.
func validText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || r == 0 {
			const hex = "0123456789abcdef"
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&15])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// clipText is valid text s cut to MaxErrorBytes and marked (cutText),
// unless it is no longer, or was cut so already: at most MaxErrorBytes
// and the mark, ending with the mark. A text cut is so kept as it is when
// written again, and none is ever longer.
func clipText(s string) string {
	if len(s) <= MaxErrorBytes || (len(s) <= MaxErrorBytes+len(TruncatedMark) && strings.HasSuffix(s, TruncatedMark)) {
		return s
	}
	return cutText(s, MaxErrorBytes) + TruncatedMark
}

// cutText is the longest start of valid text s of at most limit bytes
// that ends on a character boundary and not inside an \xNN, as validText
// writes a byte (nor inside text that reads as one).
func cutText(s string, limit int) string {
	if limit >= len(s) {
		return s
	}
	cut := max(limit, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	for k := 1; k <= 3 && k <= cut; k++ {
		if e := s[cut-k:]; len(e) >= 4 && e[0] == '\\' && e[1] == 'x' && isHex(e[2]) && isHex(e[3]) {
			return s[:cut-k]
		}
	}
	return s[:cut]
}

// isHex reports whether c is a hexadecimal digit.
func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// lastErrors is rows with the error of each as a job keeps it
// (LastErrorText): a copy, when any changes.
func lastErrors(rows []SetRow) []SetRow {
	out, copied := rows, false
	for i, r := range rows {
		text := LastErrorText(r.Error, r.Record)
		if text == r.Error {
			continue
		}
		if !copied {
			out, copied = append([]SetRow(nil), rows...), true
		}
		out[i].Error = text
	}
	return out
}
