package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestRedactorShapes(t *testing.T) {
	r, err := New([]string{"HF_TOKEN=hf_literalvalue", "MY_PASSWORD=short", "VISIBLE_VAR=visible-value-123", "API_KEY=<redacted>"}, []string{`corp-[0-9]{4}`})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		// literal values of secret-named variables, anywhere
		{"token is hf_literalvalue here", "token is <redacted> here"},
		// shorter than minLiteral: only caught by shape
		{"pw short", "pw short"},
		{"visible-value-123", "visible-value-123"},
		{"hf_abcdefghijklmnopqrstuvwxyz0123", "<redacted>"},
		{"hf_short", "hf_short"},
		{"Authorization: Bearer abc.def-ghi_jkl", "Authorization: Bearer <redacted>"},
		{`{"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}`, `{"Authorization": "Basic <redacted>"}`},
		{"bearer of bad news", "bearer of bad news"},
		{"git clone https://bob:pa55word@github.com/x.git", "git clone https://<redacted>@github.com/x.git"},
		{"https://github.com/x.git and user@host", "https://github.com/x.git and user@host"},
		{"id AKIAIOSFODNN7EXAMPLE.", "id <redacted>."},
		// A file named after a prompt: '_' before the key, where `\b` did not match.
		{"Output saved to outputs/a_cat_sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX_20260101-000000_ab12cd34.png", "Output saved to outputs/a_cat_<redacted>.png"},
		{"outputs/a_cat_AKIAIOSFODNN7EXAMPLE_20260101-000000_ab12cd34.png", "outputs/a_cat_<redacted>_20260101-000000_ab12cd34.png"},
		{"AKIAIOSFODNN7EXAMPLE AKIAIOSFODNN7EXAMPLF", "<redacted> <redacted>"},
		// ... but a letter or digit before the prefix still means a word, not a key.
		{"task-ABCDEFGHIJKLMNOPQRSTUVWXYZ done", "task-ABCDEFGHIJKLMNOPQRSTUVWXYZ done"},
		{"XAKIAIOSFODNN7EXAMPLE", "XAKIAIOSFODNN7EXAMPLE"},
		{"aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = <redacted>"},
		{"export GITHUB_TOKEN=ghp_123456", "export GITHUB_TOKEN=<redacted>"},
		{`SECRET_KEY_BASE = "abc123xyz"`, `SECRET_KEY_BASE = "<redacted>"`},
		{`"OPENAI_API_KEY": "sk-abc"`, `"OPENAI_API_KEY": "<redacted>"`},
		{"SGLANG_MAX_TOKENS=4096 TOKENIZER_PATH=/m", "SGLANG_MAX_TOKENS=4096 TOKENIZER_PATH=/m"},
		{`"key": "qwen-image/default/4st/s0"`, `"key": "qwen-image/default/4st/s0"`},
		{"ServerArgs(api_key='abc123', hf_token=\"tok99\", tokenizer_path='Qwen/x', max_tokens=4)", "ServerArgs(api_key='<redacted>', hf_token=\"<redacted>\", tokenizer_path='Qwen/x', max_tokens=4)"},
		{"--hf-token abc --api-key=xyz --tokenizer-path /m --max-tokens 10", "--hf-token <redacted> --api-key=<redacted> --tokenizer-path /m --max-tokens 10"},
		// Names judged by IsSecretName's words in every shape (issue 14 review): query
		// parameters and fragments, flags with '_', YAML keys.
		{"GET https://hub.example.com/x?hf_token=abc123XYZ&rev=main", "GET https://hub.example.com/x?hf_token=<redacted>&rev=main"},
		{"https://app.example.com/cb#access_token=abc123&state=s1", "https://app.example.com/cb#access_token=<redacted>&state=s1"},
		{"https://x.io/?key=abc&page=2&sig=zz99", "https://x.io/?key=<redacted>&page=2&sig=<redacted>"},
		{"https://x.io/v1?max_tokens=4096&tokenizer=Qwen", "https://x.io/v1?max_tokens=4096&tokenizer=Qwen"},
		{"--hf_token abc --openai_api_key=xyz --max_new_tokens 10 --tokenizer_path /m", "--hf_token <redacted> --openai_api_key=<redacted> --max_new_tokens 10 --tokenizer_path /m"},
		{"--ssl-keyfile /k.pem --key-file /k.pem", "--ssl-keyfile /k.pem --key-file /k.pem"},
		{"hf_token: abcdefgh12345678", "hf_token: <redacted>"},
		{"  wandb_api_key: abc", "  wandb_api_key: <redacted>"},
		{`"accessToken": "abcdefgh1234"`, `"accessToken": "<redacted>"`},
		{"TOKENIZER_PATH: Qwen/Qwen-Image PAD_TOKEN_ID=151643 KEY_FILE=/etc/k.pem", "TOKENIZER_PATH: Qwen/Qwen-Image PAD_TOKEN_ID=151643 KEY_FILE=/etc/k.pem"},
		// sglang's own counters and a perf dump's numbers are no secrets.
		{"Decode batch. #running-req: 64, #token: 53120, token usage: 0.41, #new-token: 512, #cached-token: 0", "Decode batch. #running-req: 64, #token: 53120, token usage: 0.41, #new-token: 512, #cached-token: 0"},
		{`"output_token_throughput": 1234.56789, "token": "<pad>"`, `"output_token_throughput": 1234.56789, "token": "<pad>"`},
		{"build corp-1234 done", "build <redacted> done"},
		{"already <redacted> stays", "already <redacted> stays"},
		// Names that say password in other words, in any shape.
		{"PGPASSWORD=pg1 psql -h db", "PGPASSWORD=<redacted> psql -h db"},
		{"MYSQL_PWD=my1 mysql -u root", "MYSQL_PWD=<redacted> mysql -u root"},
		{`export DB_PASS=db1 REDIS_AUTH="re1"`, `export DB_PASS=<redacted> REDIS_AUTH="<redacted>"`},
		{`{"SSHPASS": "ss1", "PWD": "/home/bob", "AUTH_TYPE": "basic"}`, `{"SSHPASS": "<redacted>", "PWD": "/home/bob", "AUTH_TYPE": "basic"}`},
		{"first_pass=3 use_auth: true db_pass: hunter2hunter2", "first_pass=3 use_auth: true db_pass: <redacted>"},
		{"bob ALL=(ALL) NOPASSWD: ALL", "bob ALL=(ALL) NOPASSWD: ALL"},
		// Passwords on a program's command line, and the -p that is a port.
		{"mysql -u root -pS3cr3t -h db app", "mysql -u root -p<redacted> -h db app"},
		{"mysql -u root -p app; mysqldump --password=S3cr3t app", "mysql -u root -p app; mysqldump --password=<redacted> app"},
		{`mariadb -p'two words' -e 'select 1'`, `mariadb -p'<redacted>' -e 'select 1'`},
		{"sshpass -p pw1 ssh -p 22 bob@host", "sshpass -p <redacted> ssh -p 22 bob@host"},
		{"sshpass -ppw1 scp -P 2222 a b:", "sshpass -p<redacted> scp -P 2222 a b:"},
		{`sshpass -e -p "pw 1" ssh host`, `sshpass -e -p "<redacted>" ssh host`},
		{`{"setup": ["sshpass -p \"pw 1\" ssh host"]}`, `{"setup": ["sshpass -p \"<redacted>\" ssh host"]}`},
		{`["sshpass", "-p", "pw1", "ssh", "-p", "22", "host"]`, `["sshpass", "-p", "<redacted>", "ssh", "-p", "22", "host"]`},
		{"docker login -u bob -p pw1 reg.io && docker run -p 8080:80 nginx", "docker login -u bob -p <redacted> reg.io && docker run -p 8080:80 nginx"},
		{"podman login --password pw1 quay.io; helm registry login --password=pw2 r.io", "podman login --password <redacted> quay.io; helm registry login --password=<redacted> r.io"},
		{"docker login --password-stdin reg.io; docker run -p 5432:5432 postgres", "docker login --password-stdin reg.io; docker run -p 5432:5432 postgres"},
		{"wandb login 0123456789abcdef0123456789abcdef01234567", "wandb login <redacted>"},
		{"wandb login --relogin --host https://wandb.example.com k3yk3yk3yk3y", "wandb login --relogin --host https://wandb.example.com <redacted>"},
		{"run `wandb login` to log in", "run `wandb login` to log in"},
		{"aws configure set aws_secret_access_key abc/def+ghi", "aws configure set aws_secret_access_key <redacted>"},
		{"aws configure set region us-east-1; npm config set _authToken npm_tok1", "aws configure set region us-east-1; npm config set _authToken <redacted>"},
		{"docker run -p 3306:3306 mysql:8.0 --port 3306", "docker run -p 3306:3306 mysql:8.0 --port 3306"},
		{"pymysql -pX", "pymysql -pX"},
	} {
		if got := r.String(tc.in); got != tc.want {
			t.Errorf("redact(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	rep := r.Report()
	got := map[string]int{}
	for _, x := range rep {
		got[x.Kind+"/"+x.Name] = x.Count
		if strings.Contains(x.Name, "literalvalue") || strings.Contains(x.Name, "corp-") {
			t.Errorf("the report names a value or a pattern: %+v", x)
		}
	}
	for _, want := range []string{"env/HF_TOKEN", "hf-token/hf-token", "bearer-token/bearer-token", "url-credential/url-credential", "aws-key/aws-key", "assignment/assignment", "flag/flag", "plan-pattern/plan pattern 1"} {
		if got[want] == 0 {
			t.Errorf("report lacks %s: %v", want, got)
		}
	}
	if got["env/HF_TOKEN"] != 1 {
		t.Errorf("HF_TOKEN counted %d times, want 1", got["env/HF_TOKEN"])
	}
}

func TestRedactorBadPattern(t *testing.T) {
	_, err := New(nil, []string{"ok", "bad(["})
	if err == nil || !strings.Contains(err.Error(), "[bundle] redact pattern 2 does not compile") {
		t.Fatalf("err = %v", err)
	}
}

func TestRedactorStreamMatchesBytes(t *testing.T) {
	r, _ := New([]string{"HF_TOKEN=hf_literalvalue"}, nil)
	in := strings.Repeat("a line with hf_literalvalue and Bearer abcdefghijk\n", 1000) + "last line without newline hf_abcdefghijklmnopqrstuvwxyz"
	var out bytes.Buffer
	if err := r.Stream(&out, strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if want := r.Clone().String(in); out.String() != want {
		t.Error("Stream and Bytes differ")
	}
	if strings.Contains(out.String(), "hf_literalvalue") || strings.Contains(out.String(), "abcdefghijk") {
		t.Error("a secret survived Stream")
	}
}

// TestStreamChunksInOrder: a stream of many chunks, redacted by one worker or several, is
// the whole text redacted at once, in order, with the same counts.
func TestStreamChunksInOrder(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 6*chunk; i++ {
		fmt.Fprintf(&b, "line %d Authorization: Bearer tok%07dabcdefgh and hf_literalvalue\n", i, i)
	}
	in := b.String()
	want, wantCounts := func() (string, int) {
		r, _ := New([]string{"HF_TOKEN=hf_literalvalue"}, nil)
		return r.String(in), r.Count()
	}()
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			t.Parallel()
			r, _ := New([]string{"HF_TOKEN=hf_literalvalue"}, nil)
			var out bytes.Buffer
			if err := r.stream(&out, strings.NewReader(in), workers); err != nil {
				t.Fatal(err)
			}
			if out.String() != want {
				t.Errorf("%d workers: the stream differs from the text redacted at once", workers)
			}
			if r.Count() != wantCounts {
				t.Errorf("%d workers: %d redactions counted, want %d", workers, r.Count(), wantCounts)
			}
		})
	}
}

// TestStreamLongLineKeepsSecretsWhole: a line longer than a chunk is cut inside, but never
// through a secret: with the secret at every offset around where the first cut falls, nothing
// of it survives, whatever the number of workers.
func TestStreamLongLineKeepsSecretsWhole(t *testing.T) {
	var filler strings.Builder
	for i := 0; filler.Len() < chunk+64<<10; i++ {
		fmt.Fprintf(&filler, `"k%d": "v%d", `, i, i)
	}
	base := filler.String()
	secrets := []string{
		`"api_key": "opaquevaluexyz123"`,
		`password: hunter2hunter2`,
		`Authorization: Bearer abcdefghijklmnop1234`,
		`ghp_` + strings.Repeat("A1b2C3d4E5", 4)[:36],
		`https://user:s3cretpassw0rd@example.com/x`,
	}
	leaks := []string{"opaquevaluexyz123", "hunter2hunter2", "abcdefghijklmnop1234", strings.Repeat("A1b2C3d4E5", 4)[:36], "s3cretpassw0rd"}
	// One subtest per secret, in parallel: all CPU, the package's longest test.
	for si, sec := range secrets {
		t.Run(leaks[si][:4], func(t *testing.T) {
			t.Parallel()
			for _, off := range probeOffsets() {
				in := base[:off] + " " + sec + ", " + base[off:] // a word of its own, as in a log
				for _, workers := range []int{1, 2} {
					r, _ := New(nil, nil)
					var out bytes.Buffer
					if err := r.stream(&out, strings.NewReader(in), workers); err != nil {
						t.Fatal(err)
					}
					if strings.Contains(out.String(), leaks[si]) {
						t.Fatalf("%q at offset %d survived a cut inside the line (%d workers)", sec, off, workers)
					}
				}
			}
		})
	}
}

// probeOffsets are where TestStreamLongLineKeepsSecretsWhole puts its secret: around the end
// of the first chunk (where a cut at the last separator falls) and around the last separator
// insideLineCut may choose (probeWindow before it). Every third byte: a cut lands inside a
// secret (at its inner separators too) over a run of offsets at least as long as its shortest
// word, and each probe redacts a megabyte four times.
func probeOffsets() []int {
	var offs []int
	for _, at := range []int{chunk, chunk - probeWindow} {
		for off := at - 48; off <= at+8; off += 3 {
			offs = append(offs, off)
		}
	}
	return offs
}

// failAfter is a writer that fails once it has taken n bytes.
type failAfter struct{ n int }

func (w *failAfter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// TestStreamWriteError: a writer that fails ends the stream with its error (no hang), however
// many chunks are still to come.
func TestStreamWriteError(t *testing.T) {
	in := strings.Repeat("a plain log line of some length, nothing secret in it at all\n", 10*chunk/60)
	for _, workers := range []int{1, 2} {
		r, _ := New(nil, nil)
		err := r.stream(&failAfter{n: 2 * chunk}, strings.NewReader(in), workers)
		if err == nil || err.Error() != "disk full" {
			t.Errorf("%d workers: err = %v, want the writer's", workers, err)
		}
	}
}

var hfToken = regexp.MustCompile(`hf_[A-Za-z0-9]{20,}`)

// FuzzRedact: no Hugging Face token and no literal secret survives redaction, whatever
// surrounds it, and redacting twice changes nothing more.
func FuzzRedact(f *testing.F) {
	f.Add("export HF_TOKEN=", "hf_abcdefghijklmnopqrstuvwxyz", " tail")
	f.Add(`{"env": {"X": "`, "supersecretvalue", `"}}`)
	f.Add("https://u:", "pass", "@host/")
	f.Add("Authorization: Bearer ", "tok.en-value_123", "\n")
	f.Add("sshpass -p '", "pw 1", "' ssh -p 22 host")
	f.Add(`["mysql", "-p`, "pw1", `", "db"]`)
	f.Fuzz(func(t *testing.T, pre, secret, post string) {
		r, err := New([]string{"MY_TOKEN=" + secret}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := r.String(pre + secret + post)
		if len(secret) >= minLiteral && secret != Redacted && !strings.Contains(Redacted, secret) && strings.Contains(out, secret) {
			t.Fatalf("literal secret %q survived in %q", secret, out)
		}
		// Streamed line by line, each long enough line of a multi-line secret is caught.
		var sb bytes.Buffer
		if err := r.Clone().Stream(&sb, strings.NewReader(pre+secret+post)); err != nil {
			t.Fatal(err)
		}
		for _, part := range strings.Split(secret, "\n") {
			part = strings.TrimRight(part, "\r")
			if len(part) >= minLiteral && !strings.Contains(Redacted, part) && strings.Contains(sb.String(), part) {
				t.Fatalf("line %q of the secret survived streaming in %q", part, sb.String())
			}
		}
		if m := hfToken.FindString(out); m != "" {
			t.Fatalf("hf token %q survived in %q", m, out)
		}
		if again := r.String(out); again != out {
			t.Fatalf("not idempotent: %q -> %q", out, again)
		}
	})
}

// BenchmarkRedactorStream measures redaction throughput on log-like text (the cost of
// bundling a long log or a full trace).
func BenchmarkRedactorStream(b *testing.B) {
	r, _ := New([]string{"HF_TOKEN=hf_literalvalue123"}, []string{`internal-[a-z0-9]+`})
	line := "[11-21 19:00:34] [DenoisingStage] step 12/50 took 412.3 ms, https://hub.example.com/x SGLANG_MAX_TOKENS=4096\n"
	data := []byte(strings.Repeat(line, (16<<20)/len(line)))
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if err := r.Stream(io.Discard, bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzKeywords: a name-based rule's keywords and prefilter accept every line its expression
// matches, so skipping the expression never lets a secret through.
func FuzzKeywords(f *testing.F) {
	for _, s := range []string{
		"export HF_TOKEN=abc", "SECRET_KEY_BASE = \"x\"", `"OPENAI_API_KEY": "sk"`, "api_key='abc'",
		"--hf-token abc", "--api-key=xyz", "Authorization: Basic dXNlcjpwYXNz", "bearer abcdefghij",
		"https://u:p@h", "AKIAIOSFODNN7EXAMPLE", "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		"hf_abcdefghijklmnopqrstu", "MY_CREDENTIALS:val", "x PASSWD\t= y", "--token\rx", "HF_TOKEN\f=x",
		"curl -U a:b", "https://x.io/?ACCESS_TOKEN=abc", `"X-Api-Key": "v"`, "sk-ABCDEFGHIJKLMNOPQRSTUVWX",
		"PGPASSWORD=x", "MYSQL_PWD=x", "redis_auth: x", "mysql -pX", "sshpass -p x ssh", "docker login -p x r",
		"wandb login 0123456789abcdef", "aws configure set aws_secret_access_key x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsRune(line, '\n') {
			return
		}
		lower := string(toLower(nil, []byte(line)))
		for _, ru := range builtinRules {
			if !ru.re.get().MatchString(line) {
				continue
			}
			if ru.pre != nil && !ru.pre([]byte(line)) {
				t.Fatalf("rule %s (%s) matches %q but its prefilter skips it", ru.kind, ru.re, line)
			}
			found := false
			for _, k := range ru.keywords {
				found = found || strings.Contains(lower, k)
			}
			if !found {
				t.Fatalf("rule %s (%s) matches %q but none of its keywords %q is in it", ru.kind, ru.re, line, ru.keywords)
			}
			// An anchored rule is tried only where a keyword begins: each match must begin
			// with one.
			if ru.at != nil {
				for _, m := range ru.re.get().FindAllStringIndex(line, -1) {
					ok := false
					for _, k := range ru.keywords {
						ok = ok || strings.HasPrefix(lower[m[0]:], k)
					}
					if !ok {
						t.Fatalf("anchored rule %s (%s) matches %q at %d, where none of its keywords %q begins", ru.kind, ru.re, line, m[0], ru.keywords)
					}
				}
			}
		}
	})
}

// logLines are the kinds of line a backend's log holds; one in fifty names a URL or an
// argument that sends a line through the rules.
var logLines = []string{
	"[2026-11-21 19:00:34 TP0] Decode batch. #running-req: 64, #token: 53120, token usage: 0.41, gen throughput (token/s): 2210.53, #queue-req: 0\n",
	"[2026-11-21 19:00:34] [DenoisingStage] step 12/50 took 412.3 ms\n",
	"INFO:     127.0.0.1:53422 - \"POST /generate HTTP/1.1\" 200 OK\n",
	"[2026-11-21 19:00:35 TP0] Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.40, #running-req: 63\n",
	"Capturing batches (bs=64 avail_mem=12.45 GB): 100%|██████████| 35/35 [00:04<00:00,  8.12it/s]\n",
}

// genLog is n bytes of log text.
func genLog(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		if i%50 == 49 {
			b.WriteString("server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tokenizer_path='Qwen/Qwen3-8B', api_key=None, max_total_tokens=None) https://huggingface.co/Qwen\n")
			continue
		}
		b.WriteString(logLines[i%len(logLines)])
	}
	return b.Bytes()
}

// BenchmarkRedactLog measures redaction of an ordinary backend log (the figure
// docs/performance.md records; the issue asks for >= 200 MB/s), with no plan pattern and
// with one.
func BenchmarkRedactLog(b *testing.B) {
	data := genLog(64 << 20)
	for _, tc := range []struct {
		name  string
		extra []string
	}{{"catalogue", nil}, {"plan-pattern", []string{`internal-[a-z0-9]+`}}} {
		b.Run(tc.name, func(b *testing.B) {
			r, err := New([]string{"HF_TOKEN=hf_literalvalue123"}, tc.extra)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := r.Stream(io.Discard, bytes.NewReader(data)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestIsSecretName: a name is secret by its words, not by a substring (issue 14 review):
// TOKENIZER_PATH and MAX_TOKENS are a model path and a count a bug report and a replay need.
func TestIsSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"HF_TOKEN": true, "GITHUB_TOKEN": true, "OPENAI_API_KEY": true, "WANDB_API_KEY": true,
		"MY_SECRET": true, "DB_PASSWORD": true, "API_KEY": true, "SECRET_KEY_BASE": true,
		"AWS_SECRET_ACCESS_KEY": true, "GOOGLE_APPLICATION_CREDENTIALS": true, "KEY": true,
		"hf_token": true, "hf-token": true, "apiKey": true, "x-api-key": true, "APIKEY": true,
		"accessToken": true, "ssl-keyfile-password": true, "API_KEYS": true, "EOS_TOKEN": true,
		"TOKENIZER_PATH": false, "MAX_TOKENS": false, "MAX_NEW_TOKENS": false, "NUM_TOKENS": false,
		"SGLANG_MAX_TOKENS": false, "TOKENIZERS_PARALLELISM": false, "PAD_TOKEN_ID": false,
		"token_ids": false, "KEY_FILE": false, "PRIVATE_KEY_FILE": false, "HF_TOKEN_PATH": false,
		"KEYS_PATH": false, "SSL_KEYFILE": false, "MONKEY_PATCH": false, "KV_CACHE_DTYPE": false,
		"PWD": false, "tokenizer-path": false, "max_total_tokens": false, "": false,
		"PGPASSWORD": true, "MYSQL_PWD": true, "DB_PASS": true, "REDIS_AUTH": true, "SSHPASS": true,
		"REDISCLI_AUTH": true, "MONGO_INITDB_ROOT_PASSWORD": true, "db_pass": true, "MONGOROOTPASSWORD": true,
		"OLDPWD": false, "PASS_THROUGH": false, "AUTH_TYPE": false, "AUTH": false, "PASS": false,
		"NOPASSWD": false, "PGPASSFILE": false, "PGPASSWORD_FILE": false, "BYPASS": false,
	} {
		if got := IsSecretName(name); got != want {
			t.Errorf("IsSecretName(%q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzScanAssign: scanAssign, the assignment rule's expression written by hand, gives the
// submatches the expression gives, wherever one of the rule's keywords begins (where the
// redactor calls it).
func FuzzScanAssign(f *testing.F) {
	for _, s := range []string{
		"export HF_TOKEN=abc", `SECRET_KEY_BASE = "x"`, `{\"openai_api_key\": \"sk\"}`, "api_key='abc'",
		"#token: 53120, token usage: 0.41", "?hf_token=X&y=1", "hf_token: ", "password:\t'", "key=\\'v'",
		"TOKENIZER_PATH=/m", "passwd =  \\\"", "credentials:\r\fx", "passphrase=;", "PassWord: p,q",
	} {
		f.Add(s)
	}
	var re *regexp.Regexp
	for _, ru := range builtinRules {
		if ru.scan != nil {
			re = ru.at.get()
		}
	}
	f.Fuzz(func(t *testing.T, line string) {
		b := []byte(line)
		for p := range b {
			ok := false
			for _, k := range assignKeywords {
				ok = ok || hasPrefixFold(b[p:], k)
			}
			if !ok {
				continue
			}
			want, got := re.FindSubmatchIndex(b[p:]), scanAssign(b[p:])
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Fatalf("at %d of %q: the expression gives %v, scanAssign %v", p, line, want, got)
			}
		}
	})
}

// FuzzCommandSpans: the command rule's scanner finds, wherever one of its programs begins a
// word, every secret its expression (commandExpr, the simplest form of each program's command
// line) finds there, with the same bounds.
func FuzzCommandSpans(f *testing.F) {
	for _, s := range []string{
		"mysql -u root -pS3cret db", "mariadb-dump -pX --all", "sshpass -p pw ssh -p 22 h", "sshpass -e -ppw ssh",
		"docker login -u bob -p pw reg", "helm registry login --password pw r", "podman login --password=pw q",
		"wandb login 0123456789abcdef0123456789abcdef01234567", "wandb login --relogin abcdefgh1",
		"aws configure set aws_secret_access_key abc/def", "aws configure set default.aws_secret_access_key x",
		"docker run -p 8080:80 img login -p 1", "/usr/bin/mysql -p'x y' -pz", `["sshpass", "-p", "x"]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		b := []byte(line)
		for p := range b {
			ok := false
			for _, k := range commandKeywords {
				ok = ok || hasPrefixFold(b[p:], k)
			}
			if !ok || (p > 0 && isAlnum(b[p-1])) {
				continue
			}
			m := commandExpr.get().FindSubmatchIndex(b[p:])
			if m == nil || m[0] != 0 {
				continue
			}
			s, e := secretSpan(m, &rule{firstGroup: true})
			got := commandSpans(b, p, nil)
			found := false
			for _, sp := range got {
				found = found || (sp[0] == p+s && sp[1] == p+e)
			}
			if !found {
				t.Fatalf("at %d of %q: the expression finds %q, the scanner %v", p, line, b[p+s:p+e], got)
			}
		}
	})
}

// TestArgv: an argv recorded one element to a line loses the secrets the rules see when it
// is written on one line, and nothing else.
func TestArgv(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"sshpass", "-p", "pw1", "ssh", "-p", "22", "host"}, []string{"sshpass", "-p", Redacted, "ssh", "-p", "22", "host"}},
		{[]string{"env", "PGPASSWORD=pg1", "psql"}, []string{"env", "PGPASSWORD=" + Redacted, "psql"}},
		{[]string{"docker", "login", "--password", "pw1", "reg"}, []string{"docker", "login", "--password", Redacted, "reg"}},
		{[]string{"aws", "configure", "set", "aws_secret_access_key", "abc"}, []string{"aws", "configure", "set", "aws_secret_access_key", Redacted}},
		{[]string{"sglang", "serve", "--api-key", "k1", "--model-path", "Qwen/Qwen-Image", "--max-tokens", "4096"}, []string{"sglang", "serve", "--api-key", Redacted, "--model-path", "Qwen/Qwen-Image", "--max-tokens", "4096"}},
		{[]string{"docker", "run", "-p", "8080:80", "nginx"}, []string{"docker", "run", "-p", "8080:80", "nginx"}},
		{[]string{"say \"hi\" <b>&amp;"}, []string{"say \"hi\" <b>&amp;"}},
		{nil, nil},
	} {
		in := slices.Clone(tc.in)
		if got := Argv(in); !slices.Equal(got, tc.want) {
			t.Errorf("Argv(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("Argv modified its argument: %q", in)
		}
	}
}

// TestForRunCommandLiterals: the secrets of a plan's command lines are searched for
// literally, so an argv written one element to a line (the run directory's JSON, a plan's
// multi-line array) or a value echoed on its own loses them too; a secret shorter than
// minLiteral is left to the rules.
func TestForRunCommandLiterals(t *testing.T) {
	r, err := ForRun(nil, nil, nil,
		[]string{"sshpass", "-p", "sshpw12", "sglang", "--api-key", "apikey1"},
		[]string{"docker login -u bob -p dockpw1 reg.io"}, []string{"wandb login 0123456789abcdef0123456789abcdef01234567"},
		[]string{"mysql -pab db"}, []string{"ssh -p 22 host"})
	if err != nil {
		t.Fatal(err)
	}
	in := "\"argv\": [\n  \"sshpass\",\n  \"-p\",\n  \"sshpw12\",\n  \"--api-key\",\n  \"apikey1\"\n]\n" +
		"login with dockpw1 and key 0123456789abcdef0123456789abcdef01234567\nab db -p 22\n"
	want := "\"argv\": [\n  \"sshpass\",\n  \"-p\",\n  \"<redacted>\",\n  \"--api-key\",\n  \"<redacted>\"\n]\n" +
		"login with <redacted> and key <redacted>\nab db -p 22\n"
	if got := r.String(in); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	var kinds []string
	for _, x := range r.Report() {
		kinds = append(kinds, x.Kind+"/"+x.Name)
		if strings.Contains(x.Name, "pw1") {
			t.Errorf("the report names a value: %+v", x)
		}
	}
	if !slices.Contains(kinds, "command/command") || !slices.Contains(kinds, "flag/flag") {
		t.Errorf("report %v: want the command and flag literals under the rules that found them", kinds)
	}
}

// TestForRunCommandLiteralsShapes: a command line's secret is searched for as written and as
// a JSON string holds it; a number found by a name-only flag is left to the rules, so the
// numbers of a perf dump keep their digits.
func TestForRunCommandLiteralsShapes(t *testing.T) {
	r, err := ForRun(nil, nil, nil, []string{"sshpass", "-p", `pw"quote1`, "x", "--token-limit", "100000"})
	if err != nil {
		t.Fatal(err)
	}
	in := "echo pw\"quote1\n{\"v\": \"pw\\\"quote1\", \"n\": 1000000}\n"
	want := "echo <redacted>\n{\"v\": \"<redacted>\", \"n\": 1000000}\n"
	if got := r.String(in); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
