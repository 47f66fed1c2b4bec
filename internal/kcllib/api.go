package kcllib

// Method names of the engine's service, as dispatched by kcl_service_call_with_length.
const (
	MethodExecProgram       = "KclService.ExecProgram"
	MethodLoadSettingsFiles = "KclService.LoadSettingsFiles"
	MethodGetVersion        = "KclService.GetVersion"
)

// CallFunc sends one encoded request to an engine: a Service in this process, or a worker.
type CallFunc func(method string, args []byte) ([]byte, error)

type message[T any] interface {
	*T
	Unmarshal([]byte) error
}

func invoke[T any, PT message[T]](call CallFunc, method string, args []byte) (*T, error) {
	b, err := call(method, args)
	if err != nil {
		return nil, err
	}
	r := PT(new(T))
	if err := r.Unmarshal(b); err != nil {
		return nil, err
	}
	return r, nil
}

// ExecProgram runs a KCL program.
func ExecProgram(call CallFunc, a *ExecProgramArgs) (*ExecProgramResult, error) {
	b, err := a.Marshal()
	if err != nil {
		return nil, err
	}
	return invoke[ExecProgramResult](call, MethodExecProgram, b)
}

// LoadSettingsFiles reads and merges kcl.yaml settings files.
func LoadSettingsFiles(call CallFunc, a *LoadSettingsFilesArgs) (*LoadSettingsFilesResult, error) {
	b, err := a.Marshal()
	if err != nil {
		return nil, err
	}
	return invoke[LoadSettingsFilesResult](call, MethodLoadSettingsFiles, b)
}

// GetVersion reports the engine version. Its argument, gpyrpc.GetVersionArgs, is empty, and so
// is its encoding.
func GetVersion(call CallFunc) (*GetVersionResult, error) {
	return invoke[GetVersionResult](call, MethodGetVersion, nil)
}
