//! The Vulkan instance and device: selection, the validation layer, the
//! allocator, and the device's limits and features as reported.

use std::ffi::{c_void, CStr};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use gpu_allocator::AllocationSizes;

use crate::VulkanError;

/// The environment variable that picks a device: its index in Vulkan's
/// enumeration, or a case-insensitive part of its name (`llvmpipe`, `nvidia`).
pub const DEVICE_ENV: &str = "PAGODA_VULKAN_DEVICE";
/// The environment variable that turns the Khronos validation layer on (`1`).
pub const VALIDATION_ENV: &str = "PAGODA_VULKAN_VALIDATION";
/// Shared memory the kernels use per workgroup at most (the tile kernel's
/// queries and page of keys; the decode kernel's key tile, queries and
/// scores: 28.3 KiB). Devices that give less are refused when they open.
const KERNEL_SHARED_MEMORY: u32 = 32 << 10;

/// The environment variable that turns the subgroup kernel variants off
/// (`0`) where the device has them.
pub const SUBGROUPS_ENV: &str = "PAGODA_VULKAN_SUBGROUPS";
/// The environment variable that turns the f16-arithmetic kernel variants
/// off (`0`) where the device has them.
pub const FLOAT16_ENV: &str = "PAGODA_VULKAN_F16";

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// How to open the backend.
#[derive(Debug, Clone, Default)]
pub struct VulkanOptions {
    /// A device index or part of a name; `None` reads [`DEVICE_ENV`], then
    /// prefers a discrete GPU, then an integrated one, then any other
    /// (virtual, then a CPU implementation such as Mesa's lavapipe).
    pub device: Option<String>,
    /// Run under the Khronos validation layer and record every message it
    /// reports (see [`VulkanBackend::validation_messages`](crate::VulkanBackend::validation_messages)).
    /// `None` reads [`VALIDATION_ENV`].
    pub validation: Option<bool>,
    /// Run the bounds-checking kernels, which check every index and report
    /// an out-of-range access as [`VulkanError::ShaderFault`]. `None` means
    /// on in debug builds (tests), off in release builds.
    pub bounds_checks: Option<bool>,
    /// Caps each KV chunk (one storage-buffer binding) below the device's
    /// `maxStorageBufferRange`, so tests can split a small pool.
    pub max_chunk_bytes: Option<u64>,
    /// Use the kernel variants that reduce with subgroup arithmetic where the
    /// device has them (`None`: yes, unless [`SUBGROUPS_ENV`] is `0`).
    /// `Some(false)` runs the plain variants, e.g. to test them.
    pub subgroups: Option<bool>,
    /// Use the variants that multiply in f16 for f16 stores where the device
    /// has `shaderFloat16` (`None`: yes, unless [`FLOAT16_ENV`] is `0`).
    pub float16: Option<bool>,
}

impl VulkanOptions {
    /// Every choice left to the environment: [`DEVICE_ENV`],
    /// [`VALIDATION_ENV`], [`SUBGROUPS_ENV`] and [`FLOAT16_ENV`] are read
    /// when the backend opens.
    pub fn from_env() -> Self {
        Self::default()
    }
}

/// What kind of device was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A discrete GPU.
    Discrete,
    /// An integrated GPU.
    Integrated,
    /// A virtual GPU.
    Virtual,
    /// A CPU implementation (lavapipe, SwiftShader).
    Cpu,
    /// Anything else.
    Other,
}

impl DeviceKind {
    fn of(t: vk::PhysicalDeviceType) -> Self {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => Self::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => Self::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => Self::Virtual,
            vk::PhysicalDeviceType::CPU => Self::Cpu,
            _ => Self::Other,
        }
    }

    /// Lower is preferred.
    fn rank(self) -> u8 {
        self as u8
    }
}

/// The chosen device, its limits and the features this backend uses.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Its index in Vulkan's enumeration.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Discrete, integrated, ...
    pub kind: DeviceKind,
    /// Vulkan version it supports, as `major.minor.patch`.
    pub api_version: String,
    /// Largest range one storage-buffer binding may cover.
    pub max_storage_buffer_range: u64,
    /// Largest single allocation.
    pub max_allocation_bytes: u64,
    /// Shared memory per workgroup.
    pub max_shared_memory: u32,
    /// Default subgroup width.
    pub subgroup_size: u32,
    /// Subgroup arithmetic (max, add) in compute shaders: what the
    /// `SUBGROUP` kernel variants need.
    pub subgroup_arithmetic: bool,
    /// Nanoseconds per timestamp tick, if compute timestamps are supported.
    pub timestamp_period_ns: Option<f32>,
    /// `shaderFloat16` (Vulkan 1.2 or later): what the `F16_ARITH` kernel
    /// variants need. Enabled on the device when present.
    pub shader_float16: bool,
    /// `storageBuffer16BitAccess` (reported; f16/bf16 are read as packed words).
    pub storage_16bit: bool,
    /// Whether the bounds-checking kernels are in use.
    pub bounds_checks: bool,
    /// Whether the validation layer is on.
    pub validation: bool,
    /// Whether the subgroup kernel variants are in use.
    pub use_subgroups: bool,
    /// Whether the f16-arithmetic kernel variants are in use (f16 stores).
    pub use_float16: bool,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}, Vulkan {}): storage buffer range {} MiB, shared memory {} KiB, subgroup {}, \
             subgroup arithmetic {}, timestamps {}, shaderFloat16 {}, 16-bit storage {}; kernels: \
             subgroups {}, f16 arithmetic {}, bounds checks {}; validation {}",
            self.name,
            self.kind,
            self.api_version,
            self.max_storage_buffer_range >> 20,
            self.max_shared_memory >> 10,
            self.subgroup_size,
            self.subgroup_arithmetic,
            if self.timestamp_period_ns.is_some() { "yes" } else { "no" },
            self.shader_float16,
            self.storage_16bit,
            self.use_subgroups,
            self.use_float16,
            self.bounds_checks,
            self.validation,
        )
    }
}

/// What the validation layer said.
#[derive(Debug, Default)]
pub(crate) struct ValidationLog {
    pub messages: Mutex<Vec<String>>,
}

unsafe extern "system" fn on_validation_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if severity.intersects(
        vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
            | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
    ) {
        // SAFETY: `user` is the `ValidationLog` the context keeps alive (boxed,
        // never moved) until after the messenger is destroyed; `data` and its
        // message are valid for the duration of the callback, as Vulkan
        // guarantees.
        let (log, message) = unsafe {
            let log = &*(user as *const ValidationLog);
            let message = (*data)
                .message_as_c_str()
                .map(|m| m.to_string_lossy().into_owned());
            (log, message.unwrap_or_default())
        };
        if let Ok(mut messages) = log.messages.lock() {
            messages.push(format!("{severity:?}: {message}"));
        }
    }
    vk::FALSE
}

/// The instance, the device and everything created from them directly.
/// Shared (`Arc`) by the backend and its stores, so the device outlives
/// every buffer; dropping the last owner waits for the device, destroys
/// everything and reports buffers that were never freed.
pub(crate) struct Context {
    _entry: ash::Entry,
    pub instance: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    pub validation: Box<ValidationLog>,
    pub device: ash::Device,
    pub queue: vk::Queue,
    pub queue_family: u32,
    pub allocator: Mutex<Option<Allocator>>,
    pub live_buffers: AtomicUsize,
    pub info: DeviceInfo,
}

fn version(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

impl Context {
    pub fn new(options: &VulkanOptions) -> Result<Arc<Self>, VulkanError> {
        // SAFETY: loading the system's Vulkan loader runs its initialisers;
        // it is the library this backend exists to call.
        let entry =
            unsafe { ash::Entry::load() }.map_err(|e| VulkanError::Loader(e.to_string()))?;
        let validation = options.validation.unwrap_or_else(|| {
            std::env::var(VALIDATION_ENV).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
        });
        if validation {
            // SAFETY: a plain query of the loader.
            let layers = unsafe { entry.enumerate_instance_layer_properties() }
                .map_err(VulkanError::vk("vkEnumerateInstanceLayerProperties"))?;
            let found = layers
                .iter()
                .any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION_LAYER));
            if !found {
                return Err(VulkanError::Unsupported(
                    "validation requested but VK_LAYER_KHRONOS_validation is not installed \
                     (Debian: vulkan-validationlayers)"
                        .into(),
                ));
            }
        }
        // 1.2, so a 1.2 device's shaderFloat16 can be enabled; a 1.1 device
        // still works (only 1.1 features are used on it).
        let app = vk::ApplicationInfo::default()
            .application_name(c"pagoda")
            .api_version(vk::API_VERSION_1_2);
        let layers = [VALIDATION_LAYER.as_ptr()];
        let extensions = [ash::ext::debug_utils::NAME.as_ptr()];
        let mut create = vk::InstanceCreateInfo::default().application_info(&app);
        if validation {
            create = create
                .enabled_layer_names(&layers)
                .enabled_extension_names(&extensions);
        }
        // SAFETY: the create info and the arrays it points to outlive the call.
        let instance = unsafe { entry.create_instance(&create, None) }
            .map_err(VulkanError::vk("vkCreateInstance"))?;
        let log = Box::<ValidationLog>::default();
        let debug = if validation {
            let utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                        | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                        | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(on_validation_message))
                .user_data(&*log as *const ValidationLog as *mut c_void);
            // SAFETY: the log the callback reads is boxed and outlives the
            // messenger, which Drop destroys before the instance.
            match unsafe { utils.create_debug_utils_messenger(&info, None) } {
                Ok(m) => Some((utils, m)),
                Err(e) => {
                    // SAFETY: nothing else was created from the instance.
                    unsafe { instance.destroy_instance(None) };
                    return Err(VulkanError::vk("vkCreateDebugUtilsMessengerEXT")(e));
                }
            }
        } else {
            None
        };
        let partial = Partial {
            instance: &instance,
            debug: debug.as_ref(),
        };
        let chosen = choose_device(&instance, options.device.clone())?;
        let (physical, queue_family, mut info) = chosen;
        info.bounds_checks = options.bounds_checks.unwrap_or(cfg!(debug_assertions));
        info.validation = validation;
        let wanted = |option: Option<bool>, env: &str| {
            option.unwrap_or_else(|| std::env::var(env).map_or(true, |v| v != "0"))
        };
        info.use_subgroups = info.subgroup_arithmetic && wanted(options.subgroups, SUBGROUPS_ENV);
        info.use_float16 = info.shader_float16 && wanted(options.float16, FLOAT16_ENV);

        let features = vk::PhysicalDeviceFeatures::default()
            .shader_storage_buffer_array_dynamic_indexing(true);
        let mut float16 =
            vk::PhysicalDeviceShaderFloat16Int8Features::default().shader_float16(true);
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family)
            .queue_priorities(&priorities)];
        let mut create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_features(&features);
        if info.use_float16 {
            create = create.push_next(&mut float16);
        }
        // SAFETY: `physical` came from this instance; the infos outlive the call.
        let device = unsafe { instance.create_device(physical, &create, None) }
            .map_err(VulkanError::vk("vkCreateDevice"))?;
        // SAFETY: the queue family and index were requested above.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.clone(),
            device: device.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: AllocationSizes::default(),
        });
        let allocator = match allocator {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: nothing was created from the device yet.
                unsafe { device.destroy_device(None) };
                return Err(e.into());
            }
        };
        std::mem::forget(partial);
        Ok(Arc::new(Self {
            _entry: entry,
            instance,
            debug,
            validation: log,
            device,
            queue,
            queue_family,
            allocator: Mutex::new(Some(allocator)),
            live_buffers: AtomicUsize::new(0),
            info,
        }))
    }

    /// Every message the validation layer reported so far.
    pub fn validation_messages(&self) -> Vec<String> {
        self.validation
            .messages
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }
}

/// Cleans up the instance (and messenger) when device setup fails part-way.
struct Partial<'a> {
    instance: &'a ash::Instance,
    debug: Option<&'a (ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

impl Drop for Partial<'_> {
    fn drop(&mut self) {
        // SAFETY: only reached when `Context::new` fails after creating the
        // instance and before creating a device: nothing else uses them.
        unsafe {
            if let Some((utils, messenger)) = self.debug {
                utils.destroy_debug_utils_messenger(*messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is the last owner of the device: every store,
        // pipeline and command pool that holds it has been dropped, so no
        // work is in flight after the wait and nothing uses these handles.
        unsafe {
            let _ = self.device.device_wait_idle();
            if let Ok(mut allocator) = self.allocator.lock() {
                allocator.take();
            }
            let live = self.live_buffers.load(Ordering::Relaxed);
            if live != 0 {
                eprintln!(
                    "pagoda-vulkan: {live} buffers were not freed before the device was destroyed"
                );
            }
            self.device.destroy_device(None);
            if let Some((utils, messenger)) = self.debug.take() {
                utils.destroy_debug_utils_messenger(messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// Picks the device: the option or [`DEVICE_ENV`] if given, else the best
/// kind with a compute queue and Vulkan 1.1.
fn choose_device(
    instance: &ash::Instance,
    choice: Option<String>,
) -> Result<(vk::PhysicalDevice, u32, DeviceInfo), VulkanError> {
    // SAFETY: plain queries of a live instance.
    let devices = unsafe { instance.enumerate_physical_devices() }
        .map_err(VulkanError::vk("vkEnumeratePhysicalDevices"))?;
    let choice = choice
        .or_else(|| std::env::var(DEVICE_ENV).ok())
        .filter(|c| !c.is_empty());
    let mut candidates = Vec::new();
    for (index, &physical) in devices.iter().enumerate() {
        // SAFETY: `physical` was enumerated from this instance.
        let props = unsafe { instance.get_physical_device_properties(physical) };
        let name = props
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // SAFETY: as above.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let Some(family) = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        else {
            continue;
        };
        if props.api_version < vk::API_VERSION_1_1 {
            continue;
        }
        candidates.push((
            index,
            physical,
            family as u32,
            name,
            props,
            families[family],
        ));
    }
    let pick = match &choice {
        Some(c) => candidates
            .iter()
            .find(|(i, _, _, name, _, _)| {
                c.parse::<usize>().is_ok_and(|n| n == *i)
                    || name.to_lowercase().contains(&c.to_lowercase())
            })
            .ok_or_else(|| {
                let names: Vec<String> = candidates
                    .iter()
                    .map(|(i, _, _, n, _, _)| format!("{i}: {n}"))
                    .collect();
                VulkanError::NoDevice(format!(
                    "{DEVICE_ENV}={c} matches none of [{}]",
                    names.join(", ")
                ))
            })?,
        None => candidates
            .iter()
            .min_by_key(|(i, _, _, _, props, _)| (DeviceKind::of(props.device_type).rank(), *i))
            .ok_or_else(|| {
                VulkanError::NoDevice(format!(
                    "{} devices enumerated, none with a compute queue and Vulkan 1.1",
                    devices.len()
                ))
            })?,
    };
    let (index, physical, family, name, props, family_props) = pick.clone();
    // SAFETY: plain queries of an enumerated device; the chained structs
    // live on this stack frame for the duration of the calls.
    let (features, f16, (subgroup, arithmetic)) = unsafe {
        let features = instance.get_physical_device_features(physical);
        let mut storage16 = vk::PhysicalDevice16BitStorageFeatures::default();
        let mut float16 = vk::PhysicalDeviceShaderFloat16Int8Features::default();
        let mut all = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut storage16)
            .push_next(&mut float16);
        instance.get_physical_device_features2(physical, &mut all);
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut subgroup);
        instance.get_physical_device_properties2(physical, &mut props2);
        (
            features,
            (
                // The f16 feature struct is core from Vulkan 1.2 on.
                float16.shader_float16 == vk::TRUE && props.api_version >= vk::API_VERSION_1_2,
                storage16.storage_buffer16_bit_access == vk::TRUE,
            ),
            (
                subgroup.subgroup_size,
                subgroup
                    .supported_stages
                    .contains(vk::ShaderStageFlags::COMPUTE)
                    && subgroup.supported_operations.contains(
                        vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC,
                    ),
            ),
        )
    };
    if features.shader_storage_buffer_array_dynamic_indexing != vk::TRUE {
        return Err(VulkanError::Unsupported(format!(
            "{name} lacks shaderStorageBufferArrayDynamicIndexing, which the chunked KV pool needs"
        )));
    }
    let limits = props.limits;
    if limits.max_compute_shared_memory_size < KERNEL_SHARED_MEMORY {
        return Err(VulkanError::Unsupported(format!(
            "{name} gives a workgroup {} bytes of shared memory; the kernels need {KERNEL_SHARED_MEMORY}",
            limits.max_compute_shared_memory_size
        )));
    }
    // SAFETY: a plain query of an enumerated device.
    let max_allocation = unsafe {
        let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maintenance3);
        instance.get_physical_device_properties2(physical, &mut props2);
        maintenance3.max_memory_allocation_size
    };
    let timestamps = family_props.timestamp_valid_bits > 0 && limits.timestamp_period > 0.0;
    let info = DeviceInfo {
        index,
        name,
        kind: DeviceKind::of(props.device_type),
        api_version: version(props.api_version),
        max_storage_buffer_range: u64::from(limits.max_storage_buffer_range),
        max_allocation_bytes: max_allocation,
        max_shared_memory: limits.max_compute_shared_memory_size,
        subgroup_size: subgroup,
        subgroup_arithmetic: arithmetic,
        timestamp_period_ns: timestamps.then_some(limits.timestamp_period),
        shader_float16: f16.0,
        storage_16bit: f16.1,
        bounds_checks: false,
        validation: false,
        use_subgroups: false,
        use_float16: false,
    };
    Ok((physical, family, info))
}
