//! The repository itself: the layout's floors and circles, every link in the docs.
//!
//! One test binary for the area (one link instead of one per file); each file is a module.

#[path = "docs_links.rs"]
mod docs_links;
#[path = "layout.rs"]
mod layout;
