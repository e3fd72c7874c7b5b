module github.com/jetrl/jetrl/proto

go 1.26.0

require github.com/vmihailenco/msgpack/v5 v5.4.1

require (
	github.com/stretchr/testify v1.12.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
)
