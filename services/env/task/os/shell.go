package os

import (
	"fmt"
	"strings"
)

// supported names the commands the shell runs, in the order error messages list them.
const supported = "cat, cd, echo, find, grep, head, ls, pwd, sort, tail, uniq, wc"

// Output bounds, so one cat of a big file cannot flood an agent's context.
const (
	maxOutputLines = 60
	maxOutputBytes = 4000
)

// shellError is a script the shell refuses before running anything (syntax or unsupported features).
type shellError struct{ msg string }

func (e *shellError) Error() string { return "bash: " + e.msg }

func refuse(format string, args ...any) error { return &shellError{fmt.Sprintf(format, args...)} }

// word is one shell word: its text after quote removal and, when it had unquoted glob characters, the
// pattern to expand (quoted metacharacters escaped with a backslash).
type word struct {
	text, pattern string
	glob          bool
}

// parse splits a script into the argument words of each pipeline stage, refusing what the subset lacks.
func parse(script string) ([][]word, error) {
	s := strings.TrimSpace(script)
	if s == "" {
		return nil, refuse("empty command")
	}
	var (
		stages          [][]word
		cur             []word
		text, pat       strings.Builder
		inWord, hasGlob bool
	)
	endWord := func() {
		if inWord {
			cur = append(cur, word{text: text.String(), pattern: pat.String(), glob: hasGlob})
		}
		text.Reset()
		pat.Reset()
		inWord, hasGlob = false, false
	}
	lit := func(c byte) { // a quoted character: never a glob metacharacter
		text.WriteByte(c)
		if c == '*' || c == '?' || c == '[' || c == '\\' {
			pat.WriteByte('\\')
		}
		pat.WriteByte(c)
		inWord = true
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			endWord()
		case c == '\n' || c == ';':
			return nil, refuse("%q is not supported: run one command or one pipeline (joined by |) per bash_action call", string(c))
		case c == '&':
			if i+1 < len(s) && s[i+1] == '&' {
				return nil, refuse("'&&' is not supported: run one command or one pipeline (joined by |) per bash_action call")
			}
			return nil, refuse("'&' (background jobs) is not supported")
		case c == '|':
			if i+1 < len(s) && s[i+1] == '|' {
				return nil, refuse("'||' is not supported: run one command or one pipeline (joined by |) per bash_action call")
			}
			endWord()
			if len(cur) == 0 {
				return nil, refuse("syntax error near unexpected token `|'")
			}
			stages, cur = append(stages, cur), nil
		case c == '>' || c == '<':
			return nil, refuse("redirection (%c) is not supported: the filesystem is read-only; pipe the output instead", c)
		case c == '`' || c == '$' && i+1 < len(s) && s[i+1] == '(':
			return nil, refuse("command substitution is not supported")
		case c == '$':
			return nil, refuse("variables ($) are not supported")
		case c == '(' || c == ')':
			return nil, refuse("subshells and groups (%c) are not supported", c)
		case c == '\\':
			if i+1 < len(s) {
				i++
				lit(s[i])
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, refuse("unexpected EOF while looking for matching `''")
			}
			for k := i + 1; k <= i+j; k++ {
				lit(s[k])
			}
			inWord = true
			i += j + 1
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				switch {
				case s[j] == '\\' && j+1 < len(s) && strings.IndexByte("\"\\$`", s[j+1]) >= 0:
					j++
				case s[j] == '$' || s[j] == '`':
					return nil, refuse("variables and command substitution are not supported")
				}
				lit(s[j])
			}
			if j >= len(s) {
				return nil, refuse("unexpected EOF while looking for matching `\"'")
			}
			inWord = true
			i = j
		default:
			text.WriteByte(c)
			pat.WriteByte(c)
			if c == '*' || c == '?' || c == '[' {
				hasGlob = true
			}
			inWord = true
		}
	}
	endWord()
	if len(cur) == 0 {
		return nil, refuse("syntax error near unexpected token `|'")
	}
	return append(stages, cur), nil
}

// shell runs scripts against one read-only filesystem.
type shell struct {
	fs  *fsys
	cwd string
	// listed is the directory the last ls printed, if any: the game's focus for the admissible calls.
	listed string
}

// result is what one script did: its standard output, its error output and its exit status.
type result struct {
	stdout, stderr string
	code           int
}

// run executes a script; a refused script is returned as an error and runs nothing.
func (sh *shell) run(script string) (result, error) {
	stages, err := parse(script)
	if err != nil {
		return result{}, err
	}
	argvs := make([][]string, len(stages))
	for i, st := range stages {
		for _, w := range st {
			if w.glob {
				m, ok := sh.fs.glob(sh.cwd, w.pattern)
				if !ok {
					return result{}, refuse("%s: argument list too long (the pattern names more than %d paths)", w.text, maxGlobPaths)
				}
				if len(m) > 0 {
					argvs[i] = append(argvs[i], m...)
					if len(argvs[i]) > maxGlobPaths {
						return result{}, refuse("%s: argument list too long (more than %d arguments)", argvs[i][0], maxGlobPaths)
					}
					continue
				}
			}
			argvs[i] = append(argvs[i], w.text)
		}
		if name := argvs[i][0]; !isSupported(name) {
			return result{}, refuse("%s: command not supported (supported: %s)", name, supported)
		}
	}
	sh.listed = ""
	var out result
	var errs strings.Builder
	stdin := ""
	for _, argv := range argvs {
		r := sh.exec(argv, stdin, len(argvs) == 1)
		errs.WriteString(r.stderr)
		stdin, out.code = r.stdout, r.code
	}
	out.stdout, out.stderr = stdin, errs.String()
	return out, nil
}

func isSupported(name string) bool {
	switch name {
	case "cat", "cd", "echo", "find", "grep", "head", "ls", "pwd", "sort", "tail", "uniq", "wc":
		return true
	}
	return false
}

// exec runs one command of a pipeline; alone is false inside a pipeline of several, whose stages run in
// subshells (so a cd there changes nothing, as in bash).
func (sh *shell) exec(argv []string, stdin string, alone bool) result {
	c := &cmd{sh: sh, name: argv[0], stdin: stdin}
	args := argv[1:]
	switch c.name {
	case "cat":
		c.cat(args)
	case "cd":
		c.cd(args, alone)
	case "pwd":
		c.out.WriteString(sh.cwd + "\n")
	case "echo":
		c.echo(args)
	case "find":
		c.find(args)
	case "grep":
		c.grep(args)
	case "head", "tail":
		c.headTail(args)
	case "ls":
		c.ls(args)
	case "sort":
		c.sort(args)
	case "uniq":
		c.uniq(args)
	case "wc":
		c.wc(args)
	}
	return result{stdout: c.out.String(), stderr: c.errs.String(), code: c.code}
}

// render turns a result into the observation an agent sees: errors first (as a terminal shows them), the
// output cut to a readable size, "(no output)" when there is none.
func render(r result) string {
	s := r.stderr + r.stdout
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "(no output)"
	}
	lines := strings.Split(s, "\n")
	cut := 0
	if len(lines) > maxOutputLines {
		cut = len(lines) - maxOutputLines
		lines = lines[:maxOutputLines]
	}
	s = strings.Join(lines, "\n")
	if len(s) > maxOutputBytes {
		s = s[:strings.LastIndexByte(s[:maxOutputBytes], '\n')+1]
		cut = len(lines) - strings.Count(s, "\n") + cut
		s = strings.TrimRight(s, "\n")
	}
	if cut > 0 {
		s += fmt.Sprintf("\n[output truncated: %d more lines]", cut)
	}
	return s
}
