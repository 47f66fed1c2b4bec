package inputexpr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxFieldPathSteps bounds a field path's steps: objects nest far less deeply, and CEL's parser
// refuses an expression nested much deeper (its recursion limit).
const MaxFieldPathSteps = 100

// FieldPath turns a field path such as `.spec.clusterIP`, `.status.loadBalancer.ingress[0].ip`,
// `.metadata.labels["app.kubernetes.io/name"]` into the equivalent CEL over `object`
// (object["spec"]["clusterIP"] ...), refusing anything else with a clear error.
//
// The grammar: one or more steps, each `.name` (letters, digits, '_' and '-'), `["key"]` or
// `['key']` (any key; inside, \\ and the quote itself are escaped with a backslash), or `[n]`
// (a list index, 0 to 999999999). Wildcards, filters and recursive descent are JSONPath's, not
// a field path's: a CEL expression says those.
func FieldPath(path string) (string, error) {
	if len(path) > MaxExpressionLength {
		return "", fmt.Errorf("the field path is %d bytes, over the limit of %d bytes", len(path), MaxExpressionLength)
	}
	if !utf8.ValidString(path) {
		return "", errors.New("invalid field path: not valid UTF-8")
	}
	if !strings.HasPrefix(path, ".") && !strings.HasPrefix(path, "[") {
		return "", pathError(path, 0, "a field path starts with '.', for example .spec.clusterIP")
	}
	var b strings.Builder
	b.WriteString(Object)
	for i, steps := 0, 0; i < len(path); steps++ {
		if steps == MaxFieldPathSteps {
			return "", fmt.Errorf("the field path has more than %d steps", MaxFieldPathSteps)
		}
		step, n, err := pathStep(path, i)
		if err != nil {
			return "", err
		}
		b.WriteString(step)
		i += n
	}
	if b.Len() > MaxExpressionLength {
		return "", fmt.Errorf("the field path is %d bytes as CEL, over the limit of %d bytes", b.Len(), MaxExpressionLength)
	}
	return b.String(), nil
}

// pathStep reads the step at path[i:], returning its CEL and its length.
func pathStep(path string, i int) (string, int, error) {
	if path[i] == '.' {
		j := i + 1
		for j < len(path) && isNameByte(path[j]) {
			j++
		}
		if j == i+1 {
			return "", 0, pathError(path, i, "'.' must be followed by a field name (letters, digits, '_', '-'); write other keys as [\"key\"]")
		}
		return "[" + strconv.Quote(path[i+1:j]) + "]", j - i, nil
	}
	if path[i] != '[' {
		return "", 0, pathError(path, i, "expected '.name', '[\"key\"]' or '[index]' (write a key with other characters as [\"key\"])")
	}
	if i+1 < len(path) && (path[i+1] == '"' || path[i+1] == '\'') {
		return quotedKey(path, i)
	}
	return listIndex(path, i)
}

func isNameByte(c byte) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// quotedKey reads ["key"] or ['key'] at path[i:].
func quotedKey(path string, i int) (string, int, error) {
	quote := path[i+1]
	var key strings.Builder
	for j := i + 2; j < len(path); j++ {
		switch c := path[j]; {
		case c == '\\':
			if j+1 < len(path) && (path[j+1] == '\\' || path[j+1] == quote) {
				key.WriteByte(path[j+1])
				j++
				continue
			}
			return "", 0, pathError(path, j, "only \\\\ and \\"+string(quote)+" may be escaped in a key")
		case c == quote:
			if j+1 >= len(path) || path[j+1] != ']' {
				return "", 0, pathError(path, j+1, "a quoted key must be closed with ']'")
			}
			return "[" + strconv.Quote(key.String()) + "]", j + 2 - i, nil
		default:
			key.WriteByte(c)
		}
	}
	return "", 0, pathError(path, i, "the quoted key is not closed")
}

// listIndex reads [n] at path[i:].
func listIndex(path string, i int) (string, int, error) {
	end := strings.IndexByte(path[i:], ']')
	if end < 0 {
		return "", 0, pathError(path, i, "'[' is not closed")
	}
	digits := path[i+1 : i+end]
	n, err := strconv.ParseUint(digits, 10, 32)
	if err != nil || n > 999_999_999 || digits == "" || digits[0] == '+' || len(digits) > 1 && digits[0] == '0' {
		return "", 0, pathError(path, i, "expected a list index (a number) or a quoted key between [ and ]; wildcards and filters need a CEL expression")
	}
	return "[" + digits + "]", end + 1, nil
}

func pathError(path string, at int, msg string) error {
	return errors.New("invalid field path " + strconv.Quote(path) + " at position " + strconv.Itoa(at+1) + ": " + msg)
}
