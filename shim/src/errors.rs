//! `cuGetErrorName` / `cuGetErrorString`: the name of every `CUresult` in `cuda.h` and a
//! short description (our own wording), from the workspace's error-name table
//! (`cuquota_driver::results`, held to the header by the census).

use std::ffi::CStr;

use cuquota_driver::results;

use crate::abi::CUresult;

pub fn name(code: CUresult) -> Option<&'static CStr> {
    results::code(code).map(|c| c.c_name)
}

pub fn description(code: CUresult) -> Option<&'static CStr> {
    results::code(code).map(|c| c.description)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        assert_eq!(name(2), Some(c"CUDA_ERROR_OUT_OF_MEMORY"));
        assert_eq!(description(0), Some(c"no error"));
        assert_eq!(name(3000), None);
        assert_eq!(description(3000), None);
        assert_eq!(name(918), Some(c"CUDA_ERROR_GRAPH_RECAPTURE_FAILURE"));
        assert_eq!(description(918), Some(c"graph recapture failed"));
    }
}
