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
	return invoke[ExecProgramResult](call, MethodExecProgram, a.Marshal())
}

// LoadSettingsFiles reads and merges kcl.yaml settings files.
func LoadSettingsFiles(call CallFunc, a *LoadSettingsFilesArgs) (*LoadSettingsFilesResult, error) {
	return invoke[LoadSettingsFilesResult](call, MethodLoadSettingsFiles, a.Marshal())
}

// GetVersion reports the engine version.
func GetVersion(call CallFunc) (*GetVersionResult, error) {
	return invoke[GetVersionResult](call, MethodGetVersion, nil)
}
