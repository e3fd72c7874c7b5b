package db

import (
	"errors"
	"strings"
)

// checkStatement checks that sql is exactly one statement the sandbox allows and returns its first
// keyword, upper-cased. The engine's authorizer is the real fence; this gives clearer messages first.
func checkStatement(sql string) (string, error) {
	toks, err := lexSQL(sql)
	if err != nil {
		return "", err
	}
	for len(toks) > 0 && toks[len(toks)-1] == ";" {
		toks = toks[:len(toks)-1]
	}
	if len(toks) == 0 {
		return "", errors.New("empty statement")
	}
	for _, t := range toks {
		if t == ";" {
			return "", errors.New("execute_sql runs one statement at a time; send the statements in separate calls")
		}
	}
	kw := strings.ToUpper(toks[0])
	switch kw {
	case "ATTACH", "DETACH", "VACUUM":
		return "", errors.New(kw + " is not allowed in this sandbox")
	}
	return kw, nil
}

// lexSQL splits sql into words and punctuation, dropping comments and whitespace; a quoted string or
// identifier becomes one token. It reports an unterminated quote or comment.
func lexSQL(sql string) ([]string, error) {
	var toks []string
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				return toks, nil
			}
			i += j + 1
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				return nil, errors.New("unterminated /* comment")
			}
			i += j + 4
		case c == '\'' || c == '"' || c == '`' || c == '[':
			end := c
			if c == '[' {
				end = ']'
			}
			j := i + 1
			for {
				k := strings.IndexByte(sql[j:], end)
				if k < 0 {
					return nil, errors.New("unterminated quote " + string(c))
				}
				j += k + 1
				if end != ']' && j < len(sql) && sql[j] == end { // a doubled quote is an escaped one
					j++
					continue
				}
				break
			}
			toks = append(toks, sql[i:j])
			i = j
		case isWordByte(c):
			j := i
			for j < len(sql) && isWordByte(sql[j]) {
				j++
			}
			toks = append(toks, sql[i:j])
			i = j
		default:
			toks = append(toks, sql[i:i+1])
			i++
		}
	}
	return toks, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
