package engine

import "strings"

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

// LastErrorText is text as a job keeps it for its last error: every
// GivenBackMark in it quoted ("; (quoted) given back without spending an
// attempt (…"), but for the last occurrence of record, when record is
// set, which is kept as written. record is a give-back's record of its
// streak (Transition.Record): it opens with the mark and holds no other
// (one that does not is none).
// Text with no mark comes back unchanged; so does quoted text.
func LastErrorText(text, record string) string {
	if !strings.Contains(text, GivenBackMark) {
		return text
	}
	if strings.HasPrefix(record, GivenBackMark) && strings.Count(record, GivenBackMark) == 1 {
		if i := strings.LastIndex(text, record); i >= 0 {
			return quoteGivenBackMarks(text[:i]) + record + quoteGivenBackMarks(text[i+len(record):])
		}
	}
	return quoteGivenBackMarks(text)
}

// quoteGivenBackMarks quotes every GivenBackMark in s. The mark overlaps
// no other occurrence of itself, and what quoting inserts ("(quoted) ",
// after the mark's "; ") holds no ";" and is preceded by "; ", not the
// mark's "attempt ": no mark is left, nor made.
func quoteGivenBackMarks(s string) string {
	return strings.ReplaceAll(s, GivenBackMark, quotedGivenBackMark)
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
