pub mod passwords;
pub mod shapes;
