package jobs

import (
	"bytes"
	"fmt"
)

// maxArgsDepth is how deeply encoded args may nest objects and arrays: as
// deep as encoding/json decodes (it refuses text nested deeper, whatever
// it decodes into). Args nested deeper encode without complaint, but no
// worker could decode them, so an enqueue refuses them.
const maxArgsDepth = 10_000

// checkArgsDepth refuses encoded args nested deeper than maxArgsDepth,
// naming the depth. Text with no more than maxArgsDepth opening brackets
// in all cannot be that deep, so only such text is scanned.
func checkArgsDepth(body []byte) error {
	if bytes.Count(body, []byte("{"))+bytes.Count(body, []byte("[")) <= maxArgsDepth {
		return nil
	}
	if d := jsonDepth(body); d > maxArgsDepth {
		return fmt.Errorf("%w: the args nest objects and arrays %d levels deep; a worker decodes at most %d (encoding/json's limit)", ErrInvalidArgs, d, maxArgsDepth)
	}
	return nil
}

// jsonDepth returns how deeply valid JSON text nests objects and arrays:
// the most '{' and '[' open at once outside strings.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}
