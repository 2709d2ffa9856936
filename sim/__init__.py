"""SimPy discrete-event simulator of AR / SD / PSD serving (imports analysis/ only, never torch)."""
