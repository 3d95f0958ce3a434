module github.com/sglprof/runner

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794
	github.com/dustin/go-humanize v1.1.0
	github.com/go-cmd/cmd v1.4.4
	github.com/google/go-cmp v0.7.0
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/klauspost/compress v1.20.3
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.73.1
	github.com/rogpeppe/go-internal v1.16.0
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/urfave/cli/v3 v3.14.0
	github.com/valyala/fastjson v1.6.10
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0
	modernc.org/sqlite v1.60.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/ncruces/go-strftime v1.0.0 // indirect
	github.com/pandatix/go-abnf v0.5.3 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	golang.org/x/tools v0.50.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	modernc.org/libc v1.77.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)
