package os

import (
	"strings"
	"testing"
)

// testFS is a small tree with every kind of entry the commands care about.
func testFS() *fsys {
	f := newFS()
	f.mkdirAll("/tmp", "root", "Jan  1 00:00")
	f.mkdirAll("/root", "root", "Jan  1 00:00")
	f.addFile("/var/log/app/app.log", "x ERROR one\ny INFO two\nz ERROR three\nw info error four\n", "root", "Mar  3 10:12", kindLog)
	f.addFile("/etc/app/config.ini", "[main]\nport = 8080\nhost = db.internal\n", "root", "Mar  3 10:12", kindConf)
	f.addFile("/home/ann/.bashrc", "alias ll='ls -l'\n", "ann", "Feb  1 09:00", kindText)
	f.addFile("/home/ann/notes.txt", "b\na\nb\n", "ann", "Feb  1 09:00", kindText)
	f.addFile("/home/ann/projects/main.go", "package main\n", "ann", "Feb  1 09:00", kindText)
	f.addFile("/srv/shop/logins.txt", "bob\nann\nbob\ncid\nbob\nann\n", "root", "Apr  2 08:30", kindList)
	f.addFile("/srv/shop/nums.txt", "10 ten\n9 nine\n100 hundred\n9 eight\n", "root", "Apr  2 08:30", kindList)
	f.finish()
	return f
}

func TestShell(t *testing.T) {
	cases := []struct {
		script string
		want   string // rendered observation
	}{
		// ls
		{"ls /home/ann", "notes.txt\nprojects"},
		{"ls -a /home/ann", ".\n..\n.bashrc\nnotes.txt\nprojects"},
		{"ls /srv/shop/logins.txt", "/srv/shop/logins.txt"},
		{"ls -l /etc/app", "total 4\n-rw-r--r-- 1 root root 38 Mar  3 10:12 config.ini"},
		{"ls -la /tmp", "total 8\ndrwxr-xr-x 2 root root 4096 Jan  1 00:00 .\ndrwxr-xr-x 8 root root 4096 Jan  1 00:00 .."},
		{"ls /etc /tmp", "/etc:\napp\n\n/tmp:"},
		{"ls /nope", "ls: cannot access '/nope': No such file or directory"},
		{"ls -z /", "ls: invalid option -- 'z'\nTry 'ls --help' for more information."},
		{"ls srv", "shop"},
		// cd and pwd
		{"pwd", "/"},
		{"cd /nope", "bash: cd: /nope: No such file or directory"},
		{"cd /etc/app/config.ini", "bash: cd: /etc/app/config.ini: Not a directory"},
		{"cd a b", "bash: cd: too many arguments"},
		{"cd /srv", "(no output)"},
		// cat and echo
		{"cat /etc/app/config.ini", "[main]\nport = 8080\nhost = db.internal"},
		{"cat /etc", "cat: /etc: Is a directory"},
		{"cat /missing", "cat: /missing: No such file or directory"},
		{"cat -n /home/ann/notes.txt", "     1\tb\n     2\ta\n     3\tb"},
		{"echo hello   world", "hello world"},
		{`echo "a  b" 'c|d'`, "a  b c|d"},
		{"echo", "(no output)"},
		// grep
		{"grep ERROR /var/log/app/app.log", "x ERROR one\nz ERROR three"},
		{"grep -c ERROR /var/log/app/app.log", "2"},
		{"grep -ci error /var/log/app/app.log", "3"},
		{"grep -c -v ERROR /var/log/app/app.log", "2"},
		{"grep -l port /etc/app/config.ini /var/log/app/app.log", "/etc/app/config.ini"},
		{"grep -n two /var/log/app/app.log", "2:y INFO two"},
		{"grep port /etc/app/config.ini /srv/shop/logins.txt", "/etc/app/config.ini:port = 8080"},
		{"grep -c zzz /etc/app/config.ini", "0"},
		{`grep "ERROR \(one\|three\)" /var/log/app/app.log`, "x ERROR one\nz ERROR three"},
		{"grep -E 'one|two' /var/log/app/app.log", "x ERROR one\ny INFO two"},
		{"grep", "grep: no pattern given\nUsage: grep [OPTION]... PATTERNS [FILE]..."},
		{"grep x /nope", "grep: /nope: No such file or directory"},
		{"cat /var/log/app/app.log | grep -c ERROR", "2"},
		// find
		{"find /home/ann", "/home/ann\n/home/ann/.bashrc\n/home/ann/notes.txt\n/home/ann/projects\n/home/ann/projects/main.go"},
		{"find /home/ann -type f", "/home/ann/.bashrc\n/home/ann/notes.txt\n/home/ann/projects/main.go"},
		{"find /home -type d", "/home\n/home/ann\n/home/ann/projects"},
		{"find / -name '*.txt'", "/home/ann/notes.txt\n/srv/shop/logins.txt\n/srv/shop/nums.txt"},
		{"find /home/ann -type f | wc -l", "3"},
		{"find /home -size 1", "find: unknown predicate `-size' (supported: -name, -type)"},
		{"find /home -type x", "find: Unknown argument to -type: x"},
		{"find /home -name", "find: missing argument to `-name'"},
		{"find /nope", "find: '/nope': No such file or directory"},
		// wc
		{"wc -l /srv/shop/logins.txt", "6 /srv/shop/logins.txt"},
		{"wc -c /etc/app/config.ini", "38 /etc/app/config.ini"},
		{"wc /home/ann/notes.txt", "3 3 6 /home/ann/notes.txt"},
		{"wc -l /home/ann/notes.txt /srv/shop/logins.txt", " 3 /home/ann/notes.txt\n 6 /srv/shop/logins.txt\n 9 total"},
		{"cat /home/ann/notes.txt | wc -w", "3"},
		{"echo a b | wc", "      1       2       4"},
		// head and tail
		{"head -n 2 /srv/shop/logins.txt", "bob\nann"},
		{"head -2 /srv/shop/logins.txt", "bob\nann"},
		{"tail -n 1 /srv/shop/logins.txt", "ann"},
		{"tail -n +5 /srv/shop/logins.txt", "bob\nann"},
		{"head -n x /srv/shop/logins.txt", "head: invalid number of lines: 'x'"},
		// sort and uniq
		{"sort /home/ann/notes.txt", "a\nb\nb"},
		{"sort -r /home/ann/notes.txt", "b\nb\na"},
		{"sort -n /srv/shop/nums.txt", "9 eight\n9 nine\n10 ten\n100 hundred"},
		{"sort -nr /srv/shop/nums.txt", "100 hundred\n10 ten\n9 nine\n9 eight"},
		{"sort /srv/shop/nums.txt", "10 ten\n100 hundred\n9 eight\n9 nine"},
		{"sort -u /home/ann/notes.txt", "a\nb"},
		{"uniq /home/ann/notes.txt", "b\na\nb"},
		{"sort /home/ann/notes.txt | uniq -c", "      1 a\n      2 b"},
		{"sort /srv/shop/logins.txt | uniq -c | sort -n -r | head -n 1", "      3 bob"},
		{"uniq /a /b", "uniq: writing to an output file is not supported"},
		// globs
		{"ls /srv/shop/*.txt", "/srv/shop/logins.txt\n/srv/shop/nums.txt"},
		{"cat /home/ann/*", "cat: /home/ann/projects: Is a directory\nb\na\nb"},
		{"wc -l /var/log/*/*.log", "4 /var/log/app/app.log"},
		{"ls /srv/shop/*.csv", "ls: cannot access '/srv/shop/*.csv': No such file or directory"},
		{"echo '*'", "*"},
		{"echo /*/..", "/etc/.. /home/.. /root/.. /srv/.. /tmp/.. /var/.."}, // one path per directory of /, as bash gives
		{"ls /*/../*/../*/../*/../*/../*/..", "bash: /*/../*/../*/../*/../*/../*/..: argument list too long (the pattern names more than 10000 paths)"},
		// refusals
		{"rm -rf /", "bash: rm: command not supported (supported: cat, cd, echo, find, grep, head, ls, pwd, sort, tail, uniq, wc)"},
		{"ls | xargs cat", "bash: xargs: command not supported (supported: cat, cd, echo, find, grep, head, ls, pwd, sort, tail, uniq, wc)"},
		{"ls > /tmp/x", "bash: redirection (>) is not supported: the filesystem is read-only; pipe the output instead"},
		{"ls; ls", `bash: ";" is not supported: run one command or one pipeline (joined by |) per bash_action call`},
		{"ls && ls", "bash: '&&' is not supported: run one command or one pipeline (joined by |) per bash_action call"},
		{"ls || ls", "bash: '||' is not supported: run one command or one pipeline (joined by |) per bash_action call"},
		{"echo $(ls)", "bash: command substitution is not supported"},
		{"echo `ls`", "bash: command substitution is not supported"},
		{"echo $HOME", "bash: variables ($) are not supported"},
		{"ls |", "bash: syntax error near unexpected token `|'"},
		{"| wc", "bash: syntax error near unexpected token `|'"},
		{"echo 'abc", "bash: unexpected EOF while looking for matching `''"},
		{"   ", "bash: empty command"},
	}
	for _, c := range cases {
		sh := shell{fs: testFS(), cwd: "/"}
		r, err := sh.run(c.script)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = render(r)
		}
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.script, got, c.want)
		}
	}
}

func TestShellStatusAndFocus(t *testing.T) {
	sh := shell{fs: testFS(), cwd: "/"}
	for _, c := range []struct {
		script string
		code   int
		listed string
	}{
		{"grep -c ERROR /var/log/app/app.log", 0, ""},
		{"grep -c zzz /var/log/app/app.log", 1, ""},
		{"grep x /nope", 2, ""},
		{"ls /nope", 2, ""},
		{"ls /srv/shop", 0, "/srv/shop"},
		{"ls -l /srv/shop/", 0, "/srv/shop"},
		{"ls /tmp /home", 0, "/home"},
		{"ls /srv/shop/logins.txt", 0, ""},
		{"ls /home | wc -l", 0, "/home"},
	} {
		r, err := sh.run(c.script)
		if err != nil || r.code != c.code || sh.listed != c.listed {
			t.Errorf("%s: code %d listed %q err %v, want code %d listed %q", c.script, r.code, sh.listed, err, c.code, c.listed)
		}
	}
}

func TestCd(t *testing.T) {
	sh := shell{fs: testFS(), cwd: "/"}
	for _, c := range []struct{ script, want, cwd string }{
		{"cd /srv | ls", "etc\nhome\nroot\nsrv\ntmp\nvar", "/"}, // a pipeline stage runs in a subshell
		{"cd srv/shop", "(no output)", "/srv/shop"},
		{"pwd", "/srv/shop", "/srv/shop"},
		{"grep -c bob logins.txt", "3", "/srv/shop"},
		{"ls ../../home/ann", "notes.txt\nprojects", "/srv/shop"},
		{"cd ..", "(no output)", "/srv"},
		{"cd", "(no output)", "/root"},
	} {
		r, err := sh.run(c.script)
		if got := render(r); err != nil || got != c.want || sh.cwd != c.cwd {
			t.Errorf("%s: %q in %s (%v), want %q in %s", c.script, got, sh.cwd, err, c.want, c.cwd)
		}
	}
}

func TestRenderTruncates(t *testing.T) {
	long := strings.Repeat("line\n", maxOutputLines+7)
	got := render(result{stdout: long})
	if !strings.HasSuffix(got, "[output truncated: 7 more lines]") || strings.Count(got, "\n") != maxOutputLines {
		t.Errorf("render of %d lines: %q", maxOutputLines+7, got[len(got)-60:])
	}
	wide := strings.Repeat(strings.Repeat("x", 199)+"\n", 40)
	if got := render(result{stdout: wide}); len(got) > maxOutputBytes+50 || !strings.Contains(got, "more lines]") {
		t.Errorf("render of %d bytes gave %d bytes", len(wide), len(got))
	}
}

func TestValueTokens(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{"port = 8080\n", "port|8080"},
		{"port: 8080\n", "port|8080"},
		{"      3 bob\n", "3|bob"},
		{"38 /etc/app/config.ini\n", "38|/etc/app/config.ini"},
		{"-rw-r--r-- 1 root root 38 Mar  3 10:12 config.ini\n", "1|root|38|Mar|3|10:12|config.ini"},
		{"a\na\n=\n", "a"},
		{"", ""},
	} {
		if got := strings.Join(valueTokens(c.out), "|"); got != c.want {
			t.Errorf("valueTokens(%q) = %q, want %q", c.out, got, c.want)
		}
	}
}

func TestSameAnswer(t *testing.T) {
	for _, c := range []struct {
		got, want string
		same      bool
	}{
		{"42", "42", true},
		{" 42. ", "42", true},
		{"42.0", "42", true},
		{`"Bob"`, "bob", true},
		{"8080", "808", false},
		{"alice", "bob", false},
		{"", "0", false},
	} {
		if sameAnswer(c.got, c.want) != c.same {
			t.Errorf("sameAnswer(%q, %q) = %v", c.got, c.want, !c.same)
		}
	}
}
