package engine

import (
	"fmt"
	"strconv"
	"strings"
)

// columns is the value of a VALUES :rows(…) parameter: one slice per
// column, all of one length ([]string, []int64, []int32 or []bool).
type columns []any

// paramKind is how a parameter is bound.
type paramKind int

const (
	scalar paramKind = iota
	list             // x IN (:ids)
	rows             // VALUES :rows(types)
)

// part is a piece of literal text and the parameter after it (param -1
// for the last piece).
type part struct {
	text  string
	param int
	kind  paramKind
	// types are a rows parameter's column types, exprs what each column's
	// value is wrapped in ("%" standing for it), and tuple one row of
	// "?" placeholders.
	types, exprs []string
	tuple        string
}

// plain reports whether no column of a rows parameter is wrapped.
func (p part) plain() bool {
	for _, e := range p.exprs {
		if e != "%" {
			return false
		}
	}
	return true
}

// rowsColumn is one column of VALUES :rows(…): a type (bigint) or a type
// wrapped in an expression whose first argument it is (NULLIF(bigint, 0)).
type rowsColumn struct{ typ, expr string }

// splitColumns reads the columns of VALUES :rows(…) from s, which follows
// the opening parenthesis, and returns where the closing one is (-1 if
// none).
func splitColumns(s string) ([]rowsColumn, int) {
	var out []rowsColumn
	depth, start := 0, 0
	add := func(c string) {
		c = strings.TrimSpace(c)
		open := strings.IndexByte(c, '(')
		if open < 0 {
			out = append(out, rowsColumn{typ: c, expr: "%"})
			return
		}
		inner := c[open+1 : len(c)-1]
		typ, rest, _ := strings.Cut(inner, ",")
		out = append(out, rowsColumn{typ: strings.TrimSpace(typ), expr: c[:open+1] + "%," + rest + ")"})
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				add(s[start:i])
				return out, i
			}
			depth--
		case ',':
			if depth == 0 {
				add(s[start:i])
				start = i + 1
			}
		}
	}
	return nil, -1
}

// sqlStatement is one catalog statement rendered for a database: its text
// where that is fixed (always, with arrays), or the parts that build it per
// call from the lengths of its lists and rows.
type sqlStatement struct {
	name  string
	fixed string
	parts []part
	// arrays: arguments go as they are, rows flattened to their columns.
	arrays   bool
	booleans bool
	hasRows  bool
}

// prepare renders text, whose parameters are named params in the order
// the caller binds them.
func prepare(name, text string, c Capabilities, params ...string) (*sqlStatement, error) {
	st := &sqlStatement{name: name, arrays: c.Arrays, booleans: c.Booleans}
	index := map[string]int{}
	for i, p := range params {
		index[p] = i
	}
	used := make([]bool, len(params))
	widths := make([]int, len(params))
	for i := range widths {
		widths[i] = 1
	}
	var lit strings.Builder
	for i := 0; i < len(text); i++ {
		ch := text[i]
		if ch != ':' {
			lit.WriteByte(ch)
			continue
		}
		if i+1 < len(text) && text[i+1] == ':' { // a cast
			lit.WriteString("::")
			i++
			continue
		}
		j := i + 1
		for j < len(text) && (text[j] == '_' || text[j] >= 'a' && text[j] <= 'z') {
			j++
		}
		if j == i+1 {
			lit.WriteByte(ch)
			continue
		}
		pname := text[i+1 : j]
		k, ok := index[pname]
		if !ok {
			return nil, fmt.Errorf("%s: parameter :%s is not bound", name, pname)
		}
		used[k] = true
		p := part{param: k}
		before := lit.String()
		switch {
		case j < len(text) && text[j] == '(':
			cols, end := splitColumns(text[j+1:])
			if end < 0 || !strings.HasSuffix(before, "VALUES ") {
				return nil, fmt.Errorf("%s: :%s(…) is not VALUES :rows(types)", name, pname)
			}
			for _, c := range cols {
				p.types, p.exprs = append(p.types, c.typ), append(p.exprs, c.expr)
			}
			p.tuple = "(" + strings.ReplaceAll(strings.Join(p.exprs, ", "), "%", "?") + ")"
			p.kind, widths[k], st.hasRows = rows, len(p.types), true
			j += end + 2
		case strings.HasSuffix(before, "IN (") && strings.HasPrefix(text[j:], ")"):
			p.kind = list
		}
		p.text = before
		st.parts = append(st.parts, p)
		lit.Reset()
		i = j - 1
	}
	st.parts = append(st.parts, part{text: lit.String(), param: -1})
	for k, u := range used {
		if !u && c.Arrays {
			return nil, fmt.Errorf("%s: parameter :%s is bound but not used", name, params[k])
		}
	}
	if c.Arrays {
		st.fixed = st.numbered(widths)
	} else if !st.hasLists() {
		st.fixed, _ = st.build(nil)
	}
	return st, nil
}

func (st *sqlStatement) hasLists() bool {
	for _, p := range st.parts {
		if p.kind != scalar {
			return true
		}
	}
	return false
}

// numbered renders the text with $n parameters: a list as = ANY($n), rows
// as unnest($n::type[], …).
func (st *sqlStatement) numbered(widths []int) string {
	first := make([]int, len(widths))
	n := 1
	for k, w := range widths {
		first[k] = n
		n += w
	}
	var b strings.Builder
	for _, p := range st.parts {
		switch {
		case p.param < 0:
			b.WriteString(p.text)
		case p.kind == list:
			b.WriteString(strings.TrimSuffix(p.text, "IN ("))
			fmt.Fprintf(&b, "= ANY($%d", first[p.param])
		case p.kind == rows:
			b.WriteString(strings.TrimSuffix(p.text, "VALUES "))
			b.WriteString("SELECT ")
			names := make([]string, len(p.types))
			for c := range p.types {
				names[c] = "c" + strconv.Itoa(c+1)
			}
			if p.plain() {
				b.WriteString("*")
			} else {
				for c, e := range p.exprs {
					if c > 0 {
						b.WriteString(", ")
					}
					b.WriteString(strings.Replace(e, "%", names[c], 1))
				}
			}
			b.WriteString(" FROM unnest(")
			for c, t := range p.types {
				if c > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "$%d::%s[]", first[p.param]+c, t)
			}
			b.WriteString(")")
			if !p.plain() {
				b.WriteString(" AS u(" + strings.Join(names, ", ") + ")")
			}
		default:
			b.WriteString(p.text)
			b.WriteString("$" + strconv.Itoa(first[p.param]))
		}
	}
	return b.String()
}

// bind returns the statement's text and arguments for args, given in the
// order of the parameters prepare was given.
func (st *sqlStatement) bind(args ...any) (string, []any) {
	if st.arrays {
		if !st.hasRows {
			return st.fixed, args
		}
		var out []any
		for _, a := range args {
			if cols, ok := a.(columns); ok {
				out = append(out, cols...)
				continue
			}
			out = append(out, a)
		}
		return st.fixed, out
	}
	if st.fixed != "" {
		out := make([]any, 0, len(st.parts))
		for _, p := range st.parts {
			if p.param >= 0 {
				out = append(out, st.value(args[p.param]))
			}
		}
		return st.fixed, out
	}
	return st.build(args)
}

// build renders "?" placeholders, one per list element and one tuple per
// row, and the arguments in their order. With nil args it renders the text
// of a statement without lists.
func (st *sqlStatement) build(args []any) (string, []any) {
	var b strings.Builder
	var out []any
	if args != nil {
		n, size := st.size(args)
		out = make([]any, 0, n)
		b.Grow(size)
	}
	for _, p := range st.parts {
		b.WriteString(p.text)
		if p.param < 0 {
			continue
		}
		if args == nil {
			b.WriteString("?")
			continue
		}
		a := args[p.param]
		switch p.kind {
		case scalar:
			b.WriteString("?")
			out = append(out, st.value(a))
		case list:
			n := 0
			switch l := a.(type) {
			case []int64:
				for _, v := range l {
					out = append(out, v)
				}
				n = len(l)
			case []string:
				for _, v := range l {
					out = append(out, v)
				}
				n = len(l)
			default:
				panic(fmt.Sprintf("%s: a list of %T", st.name, a))
			}
			if n == 0 {
				b.WriteString("NULL") // x IN (NULL) holds for no x
			}
			for k := range n {
				if k > 0 {
					b.WriteString(", ")
				}
				b.WriteByte('?')
			}
		case rows:
			cols := a.(columns)
			n := columnLen(cols[0])
			for r := range n {
				if r > 0 {
					b.WriteString(", ")
				}
				b.WriteString(p.tuple)
				for _, c := range cols {
					out = append(out, st.value(cell(c, r)))
				}
			}
		}
	}
	return b.String(), out
}

// size returns how many arguments build binds for args, and about how
// long its text is.
func (st *sqlStatement) size(args []any) (n, size int) {
	for _, p := range st.parts {
		size += len(p.text)
		if p.param < 0 {
			continue
		}
		k := 1
		switch p.kind {
		case list:
			k = max(columnLen(args[p.param]), 1)
		case rows:
			cols := args[p.param].(columns)
			k = columnLen(cols[0]) * len(cols)
		}
		n += k
		size += 3 * k
	}
	return n, size
}

// value converts a bool to 0 or 1 where booleans are integers.
func (st *sqlStatement) value(a any) any {
	if b, ok := a.(bool); ok && !st.booleans {
		if b {
			return 1
		}
		return 0
	}
	return a
}

func columnLen(c any) int {
	switch c := c.(type) {
	case []string:
		return len(c)
	case []int64:
		return len(c)
	case []int32:
		return len(c)
	case []bool:
		return len(c)
	}
	panic(fmt.Sprintf("a column of %T", c))
}

// cell returns row r of column c.
func cell(c any, r int) any {
	switch c := c.(type) {
	case []string:
		return c[r]
	case []int64:
		return c[r]
	case []int32:
		return c[r]
	case []bool:
		return c[r]
	}
	panic(fmt.Sprintf("a column of %T", c))
}
