package triage

import (
	"strings"
)

// Canonical returns the grouping key of a GPU op name (anchor §5.1, improved): whitespace runs
// collapse to one space, hexadecimal addresses become 0xADDR, and a trailing C++ parameter list
// is dropped for every demangled name that ends in ")" — not only for names starting "void ",
// so NCCL's ncclDevKernel_X(ncclDevKernelArgsStorage<4096ul>) and cuBLAS helpers group the same
// way whatever the demangler printed. Template arguments are kept: different instantiations are
// different kernels. Memcpy/Memset names ("Memcpy DtoD (Device -> Device)") keep their
// parenthesised direction because it is part of what the operation is.
func Canonical(name string) string {
	s := collapseSpace(name)
	s = replaceHex(s)
	if strings.HasPrefix(s, "Memcpy ") || strings.HasPrefix(s, "Memset ") || strings.HasPrefix(s, "hipMemcpy") {
		return s
	}
	return stripParams(s)
}

func collapseSpace(s string) string {
	need := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\t' || c == '\n' || c == '\r' || (c == ' ' && (i == 0 || i+1 == len(s) || s[i+1] == ' ')) {
			need = true
			break
		}
	}
	if !need {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

func replaceHex(s string) string {
	if !strings.Contains(s, "0x") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "0xADDR") && (i == 0 || !isIdent(s[i-1])) {
			b.WriteString("0xADDR") // already canonical: keep idempotent
			i += 6
			continue
		}
		if i+2 < len(s) && s[i] == '0' && s[i+1] == 'x' && isHex(s[i+2]) && (i == 0 || !isIdent(s[i-1])) {
			j := i + 2
			for j < len(s) && isHex(s[j]) {
				j++
			}
			b.WriteString("0xADDR")
			i = j
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isIdent(c byte) bool {
	return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// stripParams cuts the parameter list that balances a final ')'. It refuses when the list
// starts the name (nothing would remain) or when the parentheses do not balance.
func stripParams(s string) string {
	if !strings.HasSuffix(s, ")") {
		return s
	}
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				if i == 0 {
					return s
				}
				// "operator()" style: the '(' closes an operator name, not a parameter list.
				return strings.TrimRight(s[:i], " ")
			}
		}
	}
	return s
}

// baseName is the canonical name without template arguments, used for classification
// (W5: argument and template types such as cutlass::... must not decide the category) and as
// the relaxed key when matching kernels between a mapping and a formal trace.
func baseName(canon string) string {
	if !strings.ContainsRune(canon, '<') {
		return canon
	}
	var b strings.Builder
	depth := 0
	for i := 0; i < len(canon); i++ {
		c := canon[i]
		switch {
		case c == '<':
			// "operator<" and "<<" are rare in kernel names; treat every '<' as a bracket.
			depth++
		case c == '>' && depth > 0:
			depth--
		case depth == 0:
			b.WriteByte(c)
		}
	}
	return b.String()
}
