module github.com/jetrl/jetrl/cmd/jetrl

go 1.26.0

require (
	github.com/jetrl/jetrl/proto v0.0.0
	github.com/jetrl/jetrl/services/advantage-normalizer v0.0.0
	github.com/jetrl/jetrl/services/env v0.0.0
	github.com/jetrl/jetrl/services/replay-buffer v0.0.0
	github.com/jetrl/jetrl/services/rollout v0.0.0
	github.com/jetrl/jetrl/services/trainer v0.0.0
	github.com/jetrl/jetrl/shared v0.0.0
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/alecthomas/kong v1.17.0 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/schollz/progressbar/v3 v3.19.1 // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.44.0 // indirect
	golang.org/x/text v0.28.0 // indirect
	gonum.org/v1/plot v0.17.0 // indirect
)

replace (
	github.com/jetrl/jetrl/proto => ../../proto
	github.com/jetrl/jetrl/services/advantage-normalizer => ../../services/advantage-normalizer
	github.com/jetrl/jetrl/services/env => ../../services/env
	github.com/jetrl/jetrl/services/replay-buffer => ../../services/replay-buffer
	github.com/jetrl/jetrl/services/rollout => ../../services/rollout
	github.com/jetrl/jetrl/services/trainer => ../../services/trainer
	github.com/jetrl/jetrl/shared => ../../shared
)
