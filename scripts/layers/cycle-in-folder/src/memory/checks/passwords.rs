use super::shapes::Shape;
pub struct Password(pub Shape);
