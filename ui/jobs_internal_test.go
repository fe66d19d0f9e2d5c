package ui

import "testing"

func TestUnescapeHTMLKeepsEscapedBackslashes(t *testing.T) {
	for in, want := range map[string]string{
		`"\u003cb\u003e \u0026"`: `"<b> &"`,
		`"\\u003c"`:              `"\\u003c"`, // a backslash, then the text u003c
		`"\\\u003c"`:             `"\\<"`,
		`"\n\u00e9\u003"`:        `"\n\u00e9\u003"`,
		`"\`:                     `"\`,
	} {
		if got := unescapeHTML(in); got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
	}
}
