package os

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// cmd is one running command: its input, and the output, errors and status it builds.
type cmd struct {
	sh        *shell
	name      string
	stdin     string
	out, errs strings.Builder
	code      int
}

// fail reports an error the way GNU tools do ("grep: x: No such file or directory") and sets the status.
func (c *cmd) fail(code int, format string, args ...any) {
	fmt.Fprintf(&c.errs, "%s: %s\n", c.name, fmt.Sprintf(format, args...))
	c.code = code
}

// flags parses GNU-style short options, bundled and anywhere before "--"; valued lists the options that
// take a value (attached or as the next argument). ok is false after an error was reported.
func (c *cmd) flags(args []string, allowed, valued string) (set map[byte]string, operands []string, ok bool) {
	set = map[byte]string{}
	usage := 1
	if c.name == "ls" || c.name == "grep" {
		usage = 2
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return set, append(operands, args[i+1:]...), true
		case strings.HasPrefix(a, "--"):
			c.fail(usage, "unrecognized option '%s'\nTry '%s --help' for more information.", a, c.name)
			return nil, nil, false
		case len(a) < 2 || a[0] != '-':
			operands = append(operands, a)
			continue
		}
		for j := 1; j < len(a); j++ {
			o := a[j]
			switch {
			case strings.IndexByte(valued, o) >= 0:
				v := a[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						c.fail(usage, "option requires an argument -- '%c'\nTry '%s --help' for more information.", o, c.name)
						return nil, nil, false
					}
					i++
					v = args[i]
				}
				set[o] = v
				j = len(a)
			case strings.IndexByte(allowed, o) >= 0:
				set[o] = ""
			default:
				c.fail(usage, "invalid option -- '%c'\nTry '%s --help' for more information.", o, c.name)
				return nil, nil, false
			}
		}
	}
	return set, operands, true
}

// input reads one operand ("-" is standard input); ok is false after an error was reported.
func (c *cmd) input(op string) (data string, ok bool) {
	if op == "-" {
		return c.stdin, true
	}
	n := c.sh.fs.lookup(abs(c.sh.cwd, op))
	switch {
	case n == nil:
		c.fail(1, "%s: No such file or directory", op)
		return "", false
	case n.dir:
		c.fail(1, "%s: Is a directory", op)
		return "", false
	}
	return n.data, true
}

// lines splits text into lines without their newlines.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func (c *cmd) writeLines(ls []string) {
	for _, l := range ls {
		c.out.WriteString(l)
		c.out.WriteByte('\n')
	}
}

func (c *cmd) cat(args []string) {
	set, ops, ok := c.flags(args, "n", "")
	if !ok {
		return
	}
	if len(ops) == 0 {
		ops = []string{"-"}
	}
	num := 0
	for _, op := range ops {
		data, ok := c.input(op)
		if !ok {
			continue
		}
		if _, n := set['n']; !n {
			c.out.WriteString(data)
			continue
		}
		for _, l := range lines(data) {
			num++
			fmt.Fprintf(&c.out, "%6d\t%s\n", num, l)
		}
	}
}

// cd is the bash builtin; its errors read "bash: cd: ...".
func (c *cmd) cd(args []string, alone bool) {
	c.name = "bash: cd"
	dir := "/root"
	switch len(args) {
	case 0:
	case 1:
		dir = args[0]
	default:
		c.fail(1, "too many arguments")
		return
	}
	p := abs(c.sh.cwd, dir)
	switch n := c.sh.fs.lookup(p); {
	case n == nil:
		c.fail(1, "%s: No such file or directory", dir)
	case !n.dir:
		c.fail(1, "%s: Not a directory", dir)
	case alone:
		c.sh.cwd = p
	}
}

func (c *cmd) echo(args []string) {
	nl := true
	if len(args) > 0 && args[0] == "-n" {
		nl, args = false, args[1:]
	}
	c.out.WriteString(strings.Join(args, " "))
	if nl {
		c.out.WriteByte('\n')
	}
}

// ls prints names one per line, as ls does when its output is not a terminal.
func (c *cmd) ls(args []string) {
	set, ops, ok := c.flags(args, "la1", "")
	if !ok {
		return
	}
	_, long := set['l']
	_, all := set['a']
	if len(ops) == 0 {
		ops = []string{"."}
	}
	type operand struct {
		text string
		n    *node
	}
	var files, dirs []operand
	for _, op := range ops {
		n := c.sh.fs.lookup(abs(c.sh.cwd, op))
		switch {
		case n == nil:
			c.fail(2, "cannot access '%s': No such file or directory", op)
		case n.dir:
			dirs = append(dirs, operand{op, n})
		default:
			files = append(files, operand{op, n})
		}
	}
	if len(files) > 0 {
		entries := make([]lsEntry, len(files))
		for i, f := range files {
			entries[i] = lsEntry{f.text, f.n}
		}
		c.printEntries(entries, long, false)
	}
	for i, d := range dirs {
		if len(files) > 0 || i > 0 {
			c.out.WriteByte('\n')
		}
		if len(ops) > 1 {
			fmt.Fprintf(&c.out, "%s:\n", d.text)
		}
		var entries []lsEntry
		if all {
			parent := d.n.parent
			if parent == nil {
				parent = d.n
			}
			entries = append(entries, lsEntry{".", d.n}, lsEntry{"..", parent})
			for _, ch := range d.n.children {
				entries = append(entries, lsEntry{ch.name, ch})
			}
		} else {
			for _, ch := range d.n.visible() {
				entries = append(entries, lsEntry{ch.name, ch})
			}
		}
		c.printEntries(entries, long, true)
		c.sh.listed = pathOf(d.n)
	}
}

type lsEntry struct {
	name string
	n    *node
}

// printEntries prints names, or ls -l lines with aligned columns (and a "total" line for a directory).
func (c *cmd) printEntries(es []lsEntry, long, total bool) {
	if !long {
		for _, e := range es {
			c.out.WriteString(e.name + "\n")
		}
		return
	}
	links := func(n *node) int {
		if !n.dir {
			return 1
		}
		k := 2
		for _, ch := range n.children {
			if ch.dir {
				k++
			}
		}
		return k
	}
	wl, ws, wo, blocks := 1, 1, 1, 0
	for _, e := range es {
		wl = max(wl, len(strconv.Itoa(links(e.n))))
		ws = max(ws, len(strconv.Itoa(e.n.size())))
		wo = max(wo, len(e.n.owner))
		blocks += (e.n.size() + 4095) / 4096 * 4
	}
	if total {
		fmt.Fprintf(&c.out, "total %d\n", blocks)
	}
	for _, e := range es {
		t := "-"
		if e.n.dir {
			t = "d"
		}
		fmt.Fprintf(&c.out, "%s%s %*d %-*s %-*s %*d %s %s\n", t, e.n.mode, wl, links(e.n), wo, e.n.owner, wo, e.n.owner, ws, e.n.size(), e.n.mtime, e.name)
	}
}

// find supports paths followed by -name PATTERN and -type f|d, combined with AND.
func (c *cmd) find(args []string) {
	var paths []string
	i := 0
	for ; i < len(args) && !strings.HasPrefix(args[i], "-") && args[i] != "!" && args[i] != "("; i++ {
		paths = append(paths, args[i])
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	var preds []func(*node) bool
	for ; i < len(args); i++ {
		a := args[i]
		switch a {
		case "-name", "-type":
		default:
			if strings.HasPrefix(a, "-") {
				c.fail(1, "unknown predicate `%s' (supported: -name, -type)", a)
			} else {
				c.fail(1, "paths must precede expression: `%s'", a)
			}
			return
		}
		if i+1 >= len(args) {
			c.fail(1, "missing argument to `%s'", a)
			return
		}
		i++
		v := args[i]
		if a == "-name" {
			if _, err := path.Match(v, ""); err != nil {
				c.fail(1, "invalid pattern `%s'", v)
				return
			}
			preds = append(preds, func(n *node) bool { ok, _ := path.Match(v, n.name); return ok })
			continue
		}
		switch v {
		case "f", "d":
			wantDir := v == "d"
			preds = append(preds, func(n *node) bool { return n.dir == wantDir })
		default:
			c.fail(1, "Unknown argument to -type: %s", v)
			return
		}
	}
	var walk func(n *node, text string)
	walk = func(n *node, text string) {
		match := true
		for _, p := range preds {
			match = match && p(n)
		}
		if match {
			c.out.WriteString(text + "\n")
		}
		for _, ch := range n.children {
			if strings.HasSuffix(text, "/") {
				walk(ch, text+ch.name)
			} else {
				walk(ch, text+"/"+ch.name)
			}
		}
	}
	for _, p := range paths {
		n := c.sh.fs.lookup(abs(c.sh.cwd, p))
		if n == nil {
			c.fail(1, "'%s': No such file or directory", p)
			continue
		}
		walk(n, p)
	}
}

// bre turns a basic regular expression (grep without -E) into Go syntax: \| \( \) \{ \} \+ \? are the
// operators there, and the bare characters are literals.
func bre(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		ch := p[i]
		if ch == '\\' && i+1 < len(p) {
			if strings.IndexByte("|(){}+?", p[i+1]) >= 0 {
				b.WriteByte(p[i+1])
			} else {
				b.WriteByte(ch)
				b.WriteByte(p[i+1])
			}
			i++
			continue
		}
		if strings.IndexByte("|(){}+?", ch) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(ch)
	}
	return b.String()
}

func (c *cmd) grep(args []string) {
	set, ops, ok := c.flags(args, "civlnE", "")
	if !ok {
		return
	}
	if len(ops) == 0 {
		c.fail(2, "no pattern given\nUsage: grep [OPTION]... PATTERNS [FILE]...")
		return
	}
	has := func(o byte) bool { _, ok := set[o]; return ok }
	pat := ops[0]
	if !has('E') {
		pat = bre(pat)
	}
	if has('i') {
		pat = "(?i)" + pat
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		c.fail(2, "invalid regular expression %q", ops[0])
		return
	}
	files := ops[1:]
	if len(files) == 0 {
		files = []string{"-"}
	}
	multi, any, failed := len(files) > 1, false, false
	for _, f := range files {
		data, ok := c.input(f)
		if !ok {
			failed = true
			continue
		}
		name := f
		if f == "-" {
			name = "(standard input)"
		}
		prefix := ""
		if multi {
			prefix = name + ":"
		}
		count := 0
		for k, l := range lines(data) {
			if re.MatchString(l) == has('v') {
				continue
			}
			count++
			if has('c') || has('l') {
				continue
			}
			if has('n') {
				fmt.Fprintf(&c.out, "%s%d:%s\n", prefix, k+1, l)
			} else {
				fmt.Fprintf(&c.out, "%s%s\n", prefix, l)
			}
		}
		any = any || count > 0
		switch {
		case has('l'):
			if count > 0 {
				c.out.WriteString(name + "\n")
			}
		case has('c'):
			fmt.Fprintf(&c.out, "%s%d\n", prefix, count)
		}
	}
	switch {
	case failed:
		c.code = 2
	case any:
		c.code = 0
	default:
		c.code = 1
	}
}

func (c *cmd) wc(args []string) {
	set, ops, ok := c.flags(args, "lwc", "")
	if !ok {
		return
	}
	var cols []byte
	for _, o := range []byte("lwc") {
		if _, ok := set[o]; ok {
			cols = append(cols, o)
		}
	}
	if len(cols) == 0 {
		cols = []byte("lwc")
	}
	type row struct {
		counts []int
		name   string
	}
	stdin := len(ops) == 0
	if stdin {
		ops = []string{"-"}
	}
	var rows []row
	total := make([]int, len(cols))
	bytes := 0
	for _, op := range ops {
		data, ok := c.input(op)
		if !ok {
			continue
		}
		r := row{name: op}
		if op == "-" && stdin {
			r.name = ""
		}
		for k, o := range cols {
			n := 0
			switch o {
			case 'l':
				n = strings.Count(data, "\n")
			case 'w':
				n = len(strings.Fields(data))
			case 'c':
				n = len(data)
			}
			r.counts = append(r.counts, n)
			total[k] += n
		}
		bytes += len(data)
		rows = append(rows, r)
	}
	if len(ops) > 1 {
		rows = append(rows, row{total, "total"})
	}
	width := 1
	switch {
	case len(cols) == 1 && len(ops) == 1:
	case stdin:
		width = 7
	default:
		width = len(strconv.Itoa(bytes))
	}
	for _, r := range rows {
		parts := make([]string, len(r.counts))
		for k, n := range r.counts {
			parts[k] = fmt.Sprintf("%*d", width, n)
		}
		line := strings.Join(parts, " ")
		if r.name != "" {
			line += " " + r.name
		}
		c.out.WriteString(line + "\n")
	}
}

// headTail is head or tail: -n N, -nN or -N lines (default 10); tail also takes -n +N (from line N on).
func (c *cmd) headTail(args []string) {
	args = slices.Clone(args)
	for i, a := range args {
		if len(a) > 1 && a[0] == '-' && strings.Trim(a[1:], "0123456789") == "" {
			args[i] = "-n" + a[1:]
		}
	}
	set, ops, ok := c.flags(args, "", "n")
	if !ok {
		return
	}
	n, from := 10, false
	if v, ok := set['n']; ok {
		if c.name == "tail" && strings.HasPrefix(v, "+") {
			from, v = true, v[1:]
		}
		k, err := strconv.Atoi(v)
		if err != nil || k < 0 {
			c.fail(1, "invalid number of lines: '%s'", set['n'])
			return
		}
		n = k
	}
	if len(ops) == 0 {
		ops = []string{"-"}
	}
	for i, op := range ops {
		data, ok := c.input(op)
		if !ok {
			continue
		}
		if len(ops) > 1 {
			if i > 0 {
				c.out.WriteByte('\n')
			}
			name := op
			if op == "-" {
				name = "standard input"
			}
			fmt.Fprintf(&c.out, "==> %s <==\n", name)
		}
		ls := lines(data)
		switch {
		case c.name == "head":
			ls = ls[:min(n, len(ls))]
		case from:
			ls = ls[min(max(n-1, 0), len(ls)):]
		default:
			ls = ls[len(ls)-min(n, len(ls)):]
		}
		c.writeLines(ls)
	}
}

// leadingNumber is the number sort -n reads at the start of a line (0 when there is none).
func leadingNumber(s string) float64 {
	s = strings.TrimLeft(s, " \t")
	end := 0
	if end < len(s) && s[end] == '-' {
		end++
	}
	digits := false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
		digits = digits || s[end] != '.'
		end++
	}
	if !digits {
		return 0
	}
	v, err := strconv.ParseFloat(strings.TrimRight(s[:end], "."), 64)
	if err != nil {
		return 0
	}
	return v
}

// sort orders lines bytewise, or by leading number with the whole line breaking ties (as GNU sort's
// last-resort comparison does); -r reverses, -u keeps the first of equal keys.
func (c *cmd) sort(args []string) {
	set, ops, ok := c.flags(args, "nru", "")
	if !ok {
		return
	}
	_, numeric := set['n']
	_, reverse := set['r']
	_, unique := set['u']
	if len(ops) == 0 {
		ops = []string{"-"}
	}
	var all []string
	for _, op := range ops {
		if data, ok := c.input(op); ok {
			all = append(all, lines(data)...)
		}
	}
	key := func(a, b string) int {
		if numeric {
			x, y := leadingNumber(a), leadingNumber(b)
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		}
		return strings.Compare(a, b)
	}
	slices.SortStableFunc(all, func(a, b string) int {
		k := key(a, b)
		if k == 0 && !unique {
			k = strings.Compare(a, b)
		}
		if reverse {
			k = -k
		}
		return k
	})
	if unique {
		all = slices.CompactFunc(all, func(a, b string) bool { return key(a, b) == 0 })
	}
	c.writeLines(all)
}

func (c *cmd) uniq(args []string) {
	set, ops, ok := c.flags(args, "c", "")
	if !ok {
		return
	}
	switch {
	case len(ops) == 2:
		c.fail(1, "writing to an output file is not supported")
		return
	case len(ops) > 2:
		c.fail(1, "extra operand '%s'", ops[2])
		return
	case len(ops) == 0:
		ops = []string{"-"}
	}
	data, ok := c.input(ops[0])
	if !ok {
		return
	}
	_, count := set['c']
	ls := lines(data)
	for i := 0; i < len(ls); {
		j := i
		for j < len(ls) && ls[j] == ls[i] {
			j++
		}
		if count {
			fmt.Fprintf(&c.out, "%7d %s\n", j-i, ls[i])
		} else {
			c.out.WriteString(ls[i] + "\n")
		}
		i = j
	}
}
