//go:build !wasip1

package wasmext

// Outside wasip1 (native unit tests) there is no host: tests of this package
// plug in a fake one.
var (
	fakeHost func(request []byte) []byte
	fakeLog  func(level LogLevel, text string)
)

// answerRegion: natively there is no linear memory to declare an area in.
func answerRegion() (ptr, size uint32, ok bool) { return 0, 0, false }

func sendHostCall(request []byte) ([]byte, string) {
	if fakeHost == nil {
		return nil, "no host: not a GOOS=wasip1 build"
	}
	answer := fakeHost(request)
	if answer == nil {
		return nil, "the host could not deliver an answer"
	}
	return answer, ""
}

func writeLog(level LogLevel, text string) {
	if fakeLog != nil {
		fakeLog(level, text)
	}
}
