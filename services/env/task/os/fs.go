package os

import (
	"path"
	"slices"
	"strings"
)

// fileKind says which commands are useful on a file; the admissible list is built from it.
type fileKind int

const (
	kindText fileKind = iota
	kindLog
	kindConf
	kindList
)

// node is a file or a directory of the simulated filesystem.
type node struct {
	name     string
	dir      bool
	data     string
	owner    string
	mode     string // permission bits as ls -l shows them, without the type letter
	mtime    string // as ls -l shows it, e.g. "Mar  3 10:12"
	kind     fileKind
	keys     []string // a config file's keys, in file order
	children []*node  // sorted by name once generation is done
	parent   *node
}

// size is what ls -l and wc -c report: a file's bytes, 4096 for a directory.
func (n *node) size() int {
	if n.dir {
		return 4096
	}
	return len(n.data)
}

// child returns the entry called name, or nil.
func (n *node) child(name string) *node {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	return nil
}

// visible lists the entries ls shows without -a.
func (n *node) visible() []*node {
	var out []*node
	for _, c := range n.children {
		if !strings.HasPrefix(c.name, ".") {
			out = append(out, c)
		}
	}
	return out
}

// fsys is one instance's filesystem; the shell only reads it, so it never changes after generation.
type fsys struct {
	root *node
}

func newFS() *fsys {
	return &fsys{root: &node{name: "/", dir: true, owner: "root", mode: "rwxr-xr-x", mtime: "Jan  1 00:00"}}
}

// abs resolves p against the working directory and cleans it.
func abs(cwd, p string) string {
	if !strings.HasPrefix(p, "/") {
		p = cwd + "/" + p
	}
	return path.Clean(p)
}

// lookup finds the node at an absolute, clean path, or nil.
func (f *fsys) lookup(p string) *node {
	n := f.root
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		if part == "" {
			continue
		}
		if !n.dir {
			return nil
		}
		if n = n.child(part); n == nil {
			return nil
		}
	}
	return n
}

// pathOf is a node's absolute path.
func pathOf(n *node) string {
	if n.parent == nil {
		return "/"
	}
	if n.parent.parent == nil {
		return "/" + n.name
	}
	return pathOf(n.parent) + "/" + n.name
}

// mkdirAll creates p and its parents (owned by owner) and returns the directory.
func (f *fsys) mkdirAll(p, owner, mtime string) *node {
	n := f.root
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		if part == "" {
			continue
		}
		c := n.child(part)
		if c == nil {
			c = &node{name: part, dir: true, owner: owner, mode: "rwxr-xr-x", mtime: mtime, parent: n}
			n.children = append(n.children, c)
		}
		n = c
	}
	return n
}

// addFile creates the file p (and its directories) and returns it.
func (f *fsys) addFile(p, data, owner, mtime string, kind fileKind) *node {
	dir := f.mkdirAll(path.Dir(p), owner, mtime)
	n := &node{name: path.Base(p), data: data, owner: owner, mode: "rw-r--r--", mtime: mtime, kind: kind, parent: dir}
	dir.children = append(dir.children, n)
	return n
}

// finish sorts every directory's entries, as ls and find print them.
func (f *fsys) finish() {
	var walk func(n *node)
	walk = func(n *node) {
		slices.SortFunc(n.children, func(a, b *node) int { return strings.Compare(a.name, b.name) })
		for _, c := range n.children {
			walk(c)
		}
	}
	walk(f.root)
}

// hasMeta reports whether a glob pattern has an unescaped metacharacter.
func hasMeta(pat string) bool {
	for i := 0; i < len(pat); i++ {
		switch pat[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return true
		}
	}
	return false
}

// unescape removes the backslashes a pattern uses to quote metacharacters.
func unescape(pat string) string {
	if !strings.Contains(pat, `\`) {
		return pat
	}
	var b strings.Builder
	for i := 0; i < len(pat); i++ {
		if pat[i] == '\\' && i+1 < len(pat) {
			i++
		}
		b.WriteByte(pat[i])
	}
	return b.String()
}

// maxGlobPaths bounds the paths one pattern may expand to, at every step of its expansion: "*/.." repeated
// multiplies them by the directory's children each time, as in bash, which would run out of memory.
const maxGlobPaths = 10_000

// glob expands a pathname pattern as bash does: sorted matches, hidden names only for a leading dot; nil
// when nothing matches. It reports false, with no matches, when the expansion passes maxGlobPaths.
func (f *fsys) glob(cwd, pat string) ([]string, bool) {
	type cand struct {
		n    *node
		text string
	}
	start, prefix := f.lookup(cwd), ""
	if strings.HasPrefix(pat, "/") {
		start, prefix = f.root, "/"
	}
	if start == nil {
		return nil, true
	}
	cur := []cand{{start, prefix}}
	parts := strings.Split(strings.Trim(pat, "/"), "/")
	for i, part := range parts {
		if part == "" {
			continue
		}
		var next []cand
		join := func(c cand, name string) string {
			if c.text == "" || strings.HasSuffix(c.text, "/") {
				return c.text + name
			}
			return c.text + "/" + name
		}
		for _, c := range cur {
			if !c.n.dir {
				continue
			}
			if !hasMeta(part) {
				name := unescape(part)
				var n *node
				switch name {
				case ".":
					n = c.n
				case "..":
					n = c.n.parent
					if n == nil {
						n = c.n
					}
				default:
					n = c.n.child(name)
				}
				if n != nil {
					next = append(next, cand{n, join(c, name)})
				}
				continue
			}
			for _, ch := range c.n.children {
				if strings.HasPrefix(ch.name, ".") && !strings.HasPrefix(part, ".") {
					continue
				}
				if ok, err := path.Match(part, ch.name); err == nil && ok {
					next = append(next, cand{ch, join(c, ch.name)})
				}
			}
		}
		if i < len(parts)-1 {
			next = slices.DeleteFunc(next, func(c cand) bool { return !c.n.dir })
		}
		if len(next) > maxGlobPaths {
			return nil, false
		}
		cur = next
	}
	out := make([]string, 0, len(cur))
	for _, c := range cur {
		out = append(out, c.text)
	}
	slices.Sort(out)
	return out, true
}
