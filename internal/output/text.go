package output

import (
	"strconv"
	"strings"
)

// Plural is one when n is 1, else many: the word (or phrase) that agrees
// with a count in a message.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// OneLine is err's text on one line: each newline becomes "; ", for a
// report field or table cell that holds an error (a joined error's parts
// are separated by newlines).
func OneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// Count is n with its noun, which takes an "s" unless n is 1: "1 member",
// "3 members".
func Count(n int, noun string) string {
	return strconv.Itoa(n) + " " + Plural(n, noun, noun+"s")
}
