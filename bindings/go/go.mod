module github.com/gpurt/gpurt/bindings/go

go 1.19
