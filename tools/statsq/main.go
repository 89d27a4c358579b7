// Command statsq prints values of a mount's stats.json, for the scripts
// that time the mount (scripts/bench.sh): one line per call, the values
// of its expressions in order, separated by spaces.
//
//	statsq MOUNT|FILE EXPR...
//
// MOUNT is a mountpoint (its .ffcvfs/stats.json is read), FILE a
// stats.json. An EXPR is a dotted path into the JSON (cache.bytes_read),
// PATH|PATH takes the first present, and A+B sums numbers; a path ending
// in ? is 0 where absent, any other absent path an error. Numbers print as
// integers where they are whole, objects and arrays as JSON.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: statsq MOUNT|FILE EXPR...  (EXPR: a.b.c, a|b, a+b, a?)")
		os.Exit(2)
	}
	out, err := run(os.Args[1], os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "statsq:", err)
		os.Exit(1)
	}
	fmt.Println(out)
}

// maxStats bounds the file read: a stats.json is a few KiB.
const maxStats = 16 << 20

func run(where string, exprs []string) (string, error) {
	path := where
	if fi, err := os.Stat(where); err == nil && fi.IsDir() {
		path = filepath.Join(where, ".ffcvfs", "stats.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if len(b) > maxStats {
		return "", fmt.Errorf("%s: %d bytes, more than a stats.json holds", path, len(b))
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var doc any
	if err := d.Decode(&doc); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	var vals []string
	for _, e := range exprs {
		v, err := eval(doc, e)
		if err != nil {
			return "", fmt.Errorf("%s: %s: %w", path, e, err)
		}
		vals = append(vals, v)
	}
	return strings.Join(vals, " "), nil
}

var errAbsent = errors.New("not in the file")

// eval returns the value of expr in doc, as text.
func eval(doc any, expr string) (string, error) {
	terms := strings.Split(expr, "+")
	if len(terms) == 1 {
		v, err := alternatives(doc, expr)
		if err != nil {
			return "", err
		}
		return format(v)
	}
	sum := new(big.Float)
	for _, t := range terms {
		v, err := alternatives(doc, t)
		if err != nil {
			return "", err
		}
		n, ok := v.(json.Number)
		if !ok {
			return "", fmt.Errorf("%s is not a number", t)
		}
		f, _, err := big.ParseFloat(n.String(), 10, 128, big.ToNearestEven)
		if err != nil {
			return "", err
		}
		sum.Add(sum, f)
	}
	return format(json.Number(sum.Text('f', -1)))
}

// alternatives returns the first of the paths a|b|... present in doc.
func alternatives(doc any, expr string) (any, error) {
	for _, p := range strings.Split(expr, "|") {
		optional := strings.HasSuffix(p, "?")
		v, err := lookup(doc, strings.TrimSuffix(p, "?"))
		switch {
		case err == nil:
			return v, nil
		case optional:
			return json.Number("0"), nil
		case !errors.Is(err, errAbsent):
			return nil, err
		}
	}
	return nil, errAbsent
}

// lookup follows a dotted path of object keys.
func lookup(doc any, path string) (any, error) {
	v := doc
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errAbsent
		}
		if v, ok = m[k]; !ok || v == nil {
			return nil, errAbsent
		}
	}
	return v, nil
}

// format writes v: a number as an integer where it is whole, text as it
// is, anything else as JSON.
func format(v any) (string, error) {
	switch x := v.(type) {
	case json.Number:
		f, _, err := big.ParseFloat(x.String(), 10, 128, big.ToNearestEven)
		if err != nil {
			return "", err
		}
		if f.IsInt() {
			i, _ := f.Int(nil)
			return i.String(), nil
		}
		return x.String(), nil
	case string:
		return x, nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}
