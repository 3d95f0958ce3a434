package load

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"

	"github.com/sglprof/runner/plans"
	"github.com/sglprof/runner/plans/infile"
)

// Datasets the benchmark can draw prompts from.
const (
	DatasetRandom   = "random"   // random token ids of a chosen length range
	DatasetShareGPT = "sharegpt" // the first turn of each ShareGPT conversation, from a local file
	DatasetPrefix   = "prefix"   // groups of prompts that share a generated system prefix
)

// Prompt is one request's input. When IDs is set the request sends token ids (exact lengths on
// the APIs that accept them); Text is the same prompt as words, for the APIs that take text
// only. InputLen and OutputLen are the lengths asked for; ApproxInput is set when InputLen is
// an estimate (text without a tokenizer).
type Prompt struct {
	Text        string
	IDs         []int
	InputLen    int
	OutputLen   int
	ApproxInput bool
}

// vocabLow and vocabHigh bound the random token ids: above the special tokens of common
// tokenizers and below the smallest vocabulary in use (32k), so every id is a real token.
const (
	vocabLow  = 1000
	vocabHigh = 30000
)

// RandomPrompts draws n prompts whose input and output lengths are uniform in
// [len·rangeRatio, len], as bench_serving's random dataset does (rangeRatio 1 means exactly len).
func RandomPrompts(n, inputLen, outputLen int, rangeRatio float64, seed uint64) []Prompt {
	rng := rand.New(rand.NewPCG(seed, 0x5bd1e995))
	if rangeRatio <= 0 || rangeRatio > 1 {
		rangeRatio = 1
	}
	draw := func(l int) int {
		lo := max(int(float64(l)*rangeRatio), 1)
		if lo >= l {
			return max(l, 1)
		}
		return lo + rng.IntN(l-lo+1)
	}
	out := make([]Prompt, n)
	for i := range out {
		in := draw(inputLen)
		ids := make([]int, in)
		for j := range ids {
			ids[j] = vocabLow + rng.IntN(vocabHigh-vocabLow)
		}
		out[i] = Prompt{IDs: ids, Text: idsText(ids), InputLen: in, OutputLen: draw(outputLen)}
	}
	return out
}

// PrefixPrompts makes groups·perGroup prompts: each group shares a random system prefix of
// prefixLen tokens and each prompt adds a question of questionLen tokens, the layout of
// bench_serving's generated-shared-prefix dataset, which measures the prefix cache. Prompts of
// different groups are interleaved so the cache sees every group at once.
func PrefixPrompts(groups, perGroup, prefixLen, questionLen, outputLen int, seed uint64) []Prompt {
	rng := rand.New(rand.NewPCG(seed, 0x2545f491))
	tokens := func(n int) []int {
		ids := make([]int, n)
		for j := range ids {
			ids[j] = vocabLow + rng.IntN(vocabHigh-vocabLow)
		}
		return ids
	}
	prefixes := make([][]int, groups)
	for g := range prefixes {
		prefixes[g] = tokens(prefixLen)
	}
	out := make([]Prompt, 0, groups*perGroup)
	for k := 0; k < perGroup; k++ {
		for g := 0; g < groups; g++ {
			ids := append(append([]int(nil), prefixes[g]...), tokens(questionLen)...)
			out = append(out, Prompt{IDs: ids, Text: idsText(ids), InputLen: len(ids), OutputLen: outputLen})
		}
	}
	return out
}

// idsText spells token ids as words, one per id, for the APIs that take text only; the server's
// tokenizer then gives about one token a word, which is why such lengths are approximate.
func idsText(ids []int) string {
	var b strings.Builder
	b.Grow(len(ids) * 6)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[id%len(words)])
	}
	return b.String()
}

var words = strings.Fields(`time person year way day thing man world life hand part child eye woman
place work week case point government company number group problem fact river stone light sound
field music paper story table garden window market letter road horse summer winter answer`)

// ShareGPTPrompts reads a ShareGPT-layout JSON file and returns up to n prompts from the first
// two turns of each conversation (the human turn is the prompt, the reply's length the output
// length unless outputLen > 0), shuffled with seed as bench_serving samples them. Conversations
// with fewer than two turns are skipped, as upstream skips them. Lengths are estimated from
// characters (about four a token) since no tokenizer is loaded: ApproxInput is set. A file that
// is not the layout is an error naming the file and the first bad record.
func ShareGPTPrompts(path string, n, outputLen int, seed uint64) ([]Prompt, error) {
	f, err := infile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sharegpt dataset: %w", err)
	}
	defer f.Close()
	return readShareGPT(f, path, n, outputLen, seed)
}

func readShareGPT(r io.Reader, name string, n, outputLen int, seed uint64) ([]Prompt, error) {
	var all []Prompt
	err := plans.ShareGPTRecords(r, name, func(_ int, rec plans.ShareGPTRecord) error {
		if len(rec.Conversations) < 2 {
			return nil
		}
		q, a := rec.Conversations[0].Value, rec.Conversations[1].Value
		out := outputLen
		if out <= 0 {
			out = approxTokens(a)
		}
		in := approxTokens(q)
		if in < 4 || out < 4 {
			return nil // bench_serving drops prompts and replies shorter than 4 tokens
		}
		all = append(all, Prompt{Text: q, InputLen: in, OutputLen: out, ApproxInput: true})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, errors.New(name + ": no conversation with two turns of 4 or more tokens")
	}
	rng := rand.New(rand.NewPCG(seed, 0x85ebca6b))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	if n > 0 && n < len(all) {
		all = all[:n]
	}
	return all, nil
}

// approxTokens estimates a text's token count at four characters a token.
func approxTokens(s string) int { return (len(s) + 3) / 4 }

// ShareGPTTurnPrompts reads a ShareGPT-layout JSON file as multi-turn conversations: each
// conversation continued turn by turn, request t of it carrying the conversation so far (its
// human and reply turns before, then human turn t) and asking for reply t's length (unless
// outputLen > 0). Consecutive requests of a conversation share everything but their last turns,
// which is what a server's prefix cache serves. Conversations are shuffled with seed and kept
// whole and in order; up to n requests are returned. The replies in a prompt are the dataset's,
// not the server's, so a request does not wait for the one before it. Lengths are estimated as
// ShareGPTPrompts estimates them.
func ShareGPTTurnPrompts(path string, n, outputLen int, seed uint64) ([]Prompt, error) {
	f, err := infile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("multiturn dataset: %w", err)
	}
	defer f.Close()
	return readShareGPTTurns(f, path, n, outputLen, seed)
}

// maxTurnPromptBytes bounds one multi-turn prompt: a conversation's later turns stop there.
const maxTurnPromptBytes = 1 << 20

func readShareGPTTurns(r io.Reader, name string, n, outputLen int, seed uint64) ([]Prompt, error) {
	var convs [][]Prompt
	total := 0
	err := plans.ShareGPTRecords(r, name, func(_ int, rec plans.ShareGPTRecord) error {
		var conv []Prompt
		var so []string
		size := 0
		for t := 0; t+1 < len(rec.Conversations); t += 2 {
			q, a := rec.Conversations[t].Value, rec.Conversations[t+1].Value
			if size += len(q) + len(a) + 2; size > maxTurnPromptBytes {
				break
			}
			so = append(so, q)
			text := strings.Join(so, "\n")
			out := outputLen
			if out <= 0 {
				out = approxTokens(a)
			}
			if approxTokens(q) < 4 || out < 4 {
				break // bench_serving drops turns shorter than 4 tokens; the conversation ends there
			}
			conv = append(conv, Prompt{Text: text, InputLen: approxTokens(text), OutputLen: out, ApproxInput: true})
			so = append(so, a)
		}
		if len(conv) > 0 {
			convs = append(convs, conv)
			total += len(conv)
		}
		if n > 0 && total >= 4*n {
			return errEnoughTurns // enough to draw n requests from, shuffled
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnoughTurns) {
		return nil, err
	}
	if len(convs) == 0 {
		return nil, errors.New(name + ": no conversation with two turns of 4 or more tokens")
	}
	rng := rand.New(rand.NewPCG(seed, 0x85ebca6b))
	rng.Shuffle(len(convs), func(i, j int) { convs[i], convs[j] = convs[j], convs[i] })
	var all []Prompt
	for _, c := range convs {
		all = append(all, c...)
		if n > 0 && len(all) >= n {
			return all[:n], nil
		}
	}
	return all, nil
}

var errEnoughTurns = errors.New("enough conversations")
