package cli

import (
	"flag"
	"fmt"
	"strconv"
)

// decimalValue is an integer flag read in decimal whatever its leading
// zeros: the flag package's Int reads "010" as octal 8 and "0x10" as 16,
// and a number a person types, or copies from sluice's own output (a
// migration's version prints as 017), is decimal.
type decimalValue struct{ n *int }

func (v decimalValue) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.Itoa(*v.n)
}

func (v decimalValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", s)
	}
	*v.n = n
	return nil
}

// decimalFlag defines an int flag read in decimal (decimalValue), as
// fs.Int would define it.
func decimalFlag(fs *flag.FlagSet, name string, value int, usage string) *int {
	n := value
	fs.Var(decimalValue{&n}, name, usage)
	return &n
}
