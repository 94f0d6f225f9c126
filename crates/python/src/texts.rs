//! Texts handed in from Python: a sequence of `str`, or an Arrow string array (pyarrow or any
//! library with the Arrow PyCapsule interface), read in place.

use std::ffi::CStr;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema, from_ffi};
use arrow_array::ffi_stream::{ArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::{Array, ArrayRef, LargeStringArray, StringArray, StringViewArray, make_array};
use arrow_schema::DataType;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyString};

/// The UTF-8 text of a `str`, borrowed from the object where the interpreter allows it.
///
/// `PyUnicode_AsUTF8AndSize` returns the object's own UTF-8 buffer (the characters themselves
/// for an ASCII string, a copy cached in the object otherwise), so no text is copied per call. It
/// joined the limited API in 3.10 but every CPython 3 exports it, so on the platforms that
/// resolve symbols by name at load time it is used on 3.9 too; elsewhere the text is encoded.
pub fn str_of<'a>(s: &'a Bound<'_, PyString>) -> PyResult<std::borrow::Cow<'a, str>> {
    #[cfg(not(windows))]
    {
        unsafe extern "C" {
            fn PyUnicode_AsUTF8AndSize(
                unicode: *mut pyo3::ffi::PyObject,
                size: *mut pyo3::ffi::Py_ssize_t,
            ) -> *const std::os::raw::c_char;
        }
        let mut size: pyo3::ffi::Py_ssize_t = 0;
        // SAFETY: `s` is a live str; the returned buffer lives as long as the object, which the
        // borrow `'a` keeps alive (str objects are immutable).
        let data = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
        if data.is_null() {
            return Err(PyErr::fetch(s.py()));
        }
        // SAFETY: CPython guarantees `size` bytes of valid UTF-8 at `data`.
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size as usize) };
        Ok(std::borrow::Cow::Borrowed(unsafe {
            std::str::from_utf8_unchecked(bytes)
        }))
    }
    #[cfg(windows)]
    {
        s.to_cow()
    }
}

/// Texts from Python, held so that worker threads can read them with the GIL released.
pub enum Texts<'py> {
    /// `str` objects (kept alive by the list that holds them).
    Strs(Vec<Bound<'py, PyString>>),
    /// Arrow string arrays, read in place (nulls are empty texts).
    Arrow(Vec<ArrayRef>),
}

/// Capsule names of the Arrow PyCapsule interface.
const SCHEMA_CAPSULE: &CStr = c"arrow_schema";
const ARRAY_CAPSULE: &CStr = c"arrow_array";
const STREAM_CAPSULE: &CStr = c"arrow_array_stream";

fn arrow_error(e: arrow_schema::ArrowError) -> PyErr {
    PyValueError::new_err(format!("cannot read the Arrow array: {e}"))
}

fn check_string_type(t: &DataType) -> PyResult<()> {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(()),
        other => Err(PyTypeError::new_err(format!(
            "texts must be strings, but the Arrow array holds {other}"
        ))),
    }
}

impl<'py> Texts<'py> {
    /// Reads `texts`: an object with `__arrow_c_array__` (a pyarrow `Array`) or
    /// `__arrow_c_stream__` (a pyarrow `ChunkedArray`), or any iterable of `str`.
    pub fn from_py(texts: &Bound<'py, PyAny>) -> PyResult<Texts<'py>> {
        if texts.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "texts must be a list of str (or an Arrow string array), not one str",
            ));
        }
        if texts.hasattr("__arrow_c_array__")? {
            let capsules = texts.call_method1("__arrow_c_array__", (texts.py().None(),))?;
            let (schema, array): (Bound<'py, PyCapsule>, Bound<'py, PyCapsule>) =
                capsules.extract()?;
            let schema_ptr = schema.pointer_checked(Some(SCHEMA_CAPSULE))?;
            let array_ptr = array.pointer_checked(Some(ARRAY_CAPSULE))?;
            // SAFETY: the capsules hold an exported Arrow schema and array; the array is moved
            // out (its capsule's copy is marked released), the schema only read.
            let data = unsafe {
                let array = FFI_ArrowArray::from_raw(array_ptr.as_ptr().cast());
                let schema = &*schema_ptr.as_ptr().cast::<FFI_ArrowSchema>();
                from_ffi(array, schema)
            }
            .map_err(arrow_error)?;
            check_string_type(data.data_type())?;
            return Ok(Texts::Arrow(vec![make_array(data)]));
        }
        if texts.hasattr("__arrow_c_stream__")? {
            let capsule = texts.call_method1("__arrow_c_stream__", (texts.py().None(),))?;
            let capsule = capsule.cast::<PyCapsule>()?;
            let ptr = capsule.pointer_checked(Some(STREAM_CAPSULE))?;
            // SAFETY: the capsule holds an exported Arrow stream, which is moved out.
            let reader = unsafe {
                ArrayStreamReader::try_new(FFI_ArrowArrayStream::from_raw(ptr.as_ptr().cast()))
            }
            .map_err(arrow_error)?;
            let mut arrays = Vec::new();
            for array in reader {
                let array = array.map_err(arrow_error)?;
                check_string_type(array.data_type())?;
                arrays.push(array);
            }
            return Ok(Texts::Arrow(arrays));
        }
        let iter = texts.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "texts must be a list of str or an Arrow string array, not {}",
                texts
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        let mut strs = Vec::with_capacity(texts.len().unwrap_or(0));
        for (i, item) in iter.enumerate() {
            let item = item?;
            let s = item.cast_into::<PyString>().map_err(|e| {
                PyTypeError::new_err(format!(
                    "texts[{i}] is a {}, not a str",
                    e.into_inner()
                        .get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))
            })?;
            strs.push(s);
        }
        Ok(Texts::Strs(strs))
    }

    /// Calls `f` with the texts as string slices, in order. `f` may release the GIL: the slices
    /// point into objects that stay alive and immutable for the whole call.
    pub fn with_slices<R>(&self, f: impl FnOnce(&[&str]) -> R) -> PyResult<R> {
        match self {
            Texts::Strs(strs) => {
                let cows = strs.iter().map(str_of).collect::<PyResult<Vec<_>>>()?;
                let slices: Vec<&str> = cows.iter().map(|c| c.as_ref()).collect();
                Ok(f(&slices))
            }
            Texts::Arrow(arrays) => {
                let mut slices = Vec::with_capacity(arrays.iter().map(|a| a.len()).sum());
                for a in arrays {
                    push_arrow_strs(a.as_ref(), &mut slices);
                }
                Ok(f(&slices))
            }
        }
    }
}

fn push_arrow_strs<'a>(array: &'a dyn Array, out: &mut Vec<&'a str>) {
    if let Some(a) = array.as_any().downcast_ref::<StringArray>() {
        out.extend(a.iter().map(|s| s.unwrap_or("")));
    } else if let Some(a) = array.as_any().downcast_ref::<LargeStringArray>() {
        out.extend(a.iter().map(|s| s.unwrap_or("")));
    } else if let Some(a) = array.as_any().downcast_ref::<StringViewArray>() {
        out.extend(a.iter().map(|s| s.unwrap_or("")));
    }
}
