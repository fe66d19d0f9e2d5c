package jobs

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJSONDepthCountsBracketsOutsideStrings(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{`1`, 0},
		{`"{[{["`, 0},
		{`{}`, 1},
		{`[[],[[]]]`, 3},
		{`{"a":[{"b":"]]]}}}"}],"c":{}}`, 3},
		{`{"a":"\"{[","b":[1]}`, 2}, // an escaped quote does not end the string
		{`{"a":"\\","b":[[1]]}`, 3}, // an escaped backslash does not escape the quote
		{`["\\\"[[[", [[]]]`, 3},    // nor does the third of three
		{`{"\u005b":"\u007b"}`, 1},  // escaped brackets are text
		{strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001), 10_001},
	} {
		require.Equal(t, c.want, jsonDepth([]byte(c.in)), c.in)
	}
}

func TestCheckArgsDepthAtEncodingJSONsLimit(t *testing.T) {
	at := []byte(strings.Repeat("[", maxArgsDepth) + strings.Repeat("]", maxArgsDepth))
	require.NoError(t, checkArgsDepth(at))
	var v any
	require.NoError(t, json.Unmarshal(at, &v), "encoding/json decodes %d levels", maxArgsDepth)

	over := []byte("[" + string(at) + "]")
	err := checkArgsDepth(over)
	require.ErrorIs(t, err, ErrInvalidArgs)
	require.ErrorContains(t, err, "10001 levels deep")
	require.Error(t, json.Unmarshal(over, &v), "encoding/json refuses %d levels", maxArgsDepth+1)

	// Many brackets, none deep.
	wide := []byte("[" + strings.Repeat("[],{},", 20_000) + `"{[{["]`)
	require.NoError(t, checkArgsDepth(wide))
}

// FuzzJSONDepth checks jsonDepth against encoding/json's own reading of
// valid JSON text: the most delimiters its tokens hold open at once.
func FuzzJSONDepth(f *testing.F) {
	for _, s := range []string{`{}`, `[[],[[]]]`, `{"a":"\"{[","b":[1]}`, `["\\\"[[[", [[]]]`, `{"\u005b":[{"x":"]"}]}`, `"\\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return
		}
		dec := json.NewDecoder(strings.NewReader(s))
		depth, want := 0, 0
		for {
			tok, err := dec.Token()
			if err != nil {
				require.ErrorIs(t, err, io.EOF)
				break
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				depth++
				want = max(want, depth)
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
		}
		require.Equal(t, want, jsonDepth([]byte(s)), "%q", s)
	})
}
