// The Go binding of gpushare's C ABI (include/gpushare/c/gpushare.h), over
// libgpushare_c.so found through pkg-config (gpushare_c.pc).
module gpushare.dev/go/gpushare

go 1.24
